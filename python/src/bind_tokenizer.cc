// bind_tokenizer.cc — text in and out from Python (issue 29, meshlayout.models.Tokenizer): the
// tokenizer of a model directory (tokenizers/tokenizer.h: a Hugging Face tokenizer.json, else a
// SentencePiece tokenizer.model), encode to token ids and decode back, so that
//
//   tok = models.Tokenizer.from_pretrained(directory)
//   ids = model.generate([tok.encode("Hello")], max_new_tokens=8)[0]
//   tok.decode(ids, skip_special_tokens=True)
//
// and write_toy_tokenizer (tokenizers/toy_tokenizer.h) for the small random models.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "meshlayout/tokenizers/tokenizer.h"
#include "meshlayout/tokenizers/toy_tokenizer.h"

namespace meshlayout::python {

void bind_tokenizer(py::module_& m) {
  using tokenizers::Tokenizer;
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(
      m, "Tokenizer",
      "The tokenizer of a model directory (tokenizer.json, else tokenizer.model): text to "
      "token ids and back")
      .def_static(
          "from_pretrained",
          [](const std::string& directory) {
            return io_call(
                [&] { return std::shared_ptr<Tokenizer>(tokenizers::load_tokenizer(directory)); });
          },
          py::arg("directory"))
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            py::gil_scoped_release release;
            return t.encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int64_t>& ids, bool skip_special_tokens) {
            return io_call([&] { return t.decode(ids, skip_special_tokens); }, true);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"))
      .def(
          "id_to_token",
          [](const Tokenizer& t, int64_t id) {
            return io_call([&] { return t.id_to_token(id); }, true);
          },
          py::arg("id"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_id)
      .def("__repr__",
           [](const Tokenizer& t) { return fmt::format("<Tokenizer {}>", t.describe()); });

  m.def(
      "write_toy_tokenizer",
      [](const std::string& directory, int64_t vocab_size) {
        io_call([&] { tokenizers::write_toy_tokenizer(directory, vocab_size); });
      },
      py::arg("directory"), py::arg("vocab_size"));
}

}  // namespace meshlayout::python
