// elementwise_test_util.h — the add / multiply / concatenate checks shared by the in-process
// and mpirun tests (test-only): random operands on mesh[data=2,model=4] in many layout pairs
// (equal, differing, uneven, 3-D), each result compared bit for bit with the same float
// operation done on the host, and its layout checked. Failures throw InternalError naming the
// case.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout::testing {

inline Array distribute_on(const std::shared_ptr<Runtime>& rt, const HostTensor& t,
                           const std::string& layout, const DeviceMesh& mesh) {
  return distribute_tensor(t, TensorLayout::from_string(layout).with_device_mesh(mesh),
                           {.runtime = rt});
}

template <typename T>
void expect_equal_tensors(const HostTensor& got, const HostTensor& want, const std::string& where) {
  if (got.shape() != want.shape()) {
    throw InternalError(fmt::format("{}: shape {} != {}", where, shape_to_string(got.shape()),
                                    shape_to_string(want.shape())));
  }
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (std::memcmp(&got.data_as<T>()[i], &want.data_as<T>()[i], sizeof(T)) != 0) {
      throw InternalError(fmt::format("{}: element {} is {} but should be {}", where, i,
                                      got.data_as<T>()[i], want.data_as<T>()[i]));
    }
  }
}

template <typename T>
void check_binary_case(const std::shared_ptr<Runtime>& rt, const DeviceMesh& mesh,
                       const Shape& shape, const std::string& la, const std::string& lb,
                       DType dtype, uint64_t seed) {
  const HostTensor ha = HostTensor::random(dtype, shape, seed);
  const HostTensor hb = HostTensor::random(dtype, shape, seed + 1);
  const Array a = distribute_on(rt, ha, la, mesh), b = distribute_on(rt, hb, lb, mesh);
  HostTensor sum(dtype, shape), product(dtype, shape);
  for (int64_t i = 0; i < ha.num_elements(); ++i) {
    sum.data_as<T>()[i] = ha.data_as<T>()[i] + hb.data_as<T>()[i];
    product.data_as<T>()[i] = ha.data_as<T>()[i] * hb.data_as<T>()[i];
  }
  const std::string where =
      fmt::format("{} {} [{}] op [{}]", dtype_name(dtype), shape_to_string(shape), la, lb);
  const Array s = add(a, b), p = multiply(a, b);
  if (s.layout() != a.layout() || p.layout() != a.layout()) {
    throw InternalError(where + ": the result is not in the first operand's layout");
  }
  expect_equal_tensors<T>(s.gather(), sum, "add " + where);
  expect_equal_tensors<T>(p.gather(), product, "multiply " + where);
}

struct ConcatCase {
  std::vector<Shape> shapes;
  std::vector<std::string> layouts;
  int64_t axis;
  std::string expected_layout;  // of the result, on the mesh
};

template <typename T>
void check_concat_case(const std::shared_ptr<Runtime>& rt, const DeviceMesh& mesh,
                       const ConcatCase& c, DType dtype, uint64_t seed) {
  std::vector<HostTensor> hosts;
  std::vector<Array> arrays;
  std::vector<const Array*> ptrs;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    hosts.push_back(HostTensor::random(dtype, c.shapes[i], seed + i));
    arrays.push_back(distribute_on(rt, hosts.back(), c.layouts[i], mesh));
  }
  for (const Array& a : arrays) ptrs.push_back(&a);
  const size_t rank = c.shapes[0].size();
  const size_t ax = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(rank) : c.axis);
  Shape out_shape = c.shapes[0];
  out_shape[ax] = 0;
  for (const Shape& s : c.shapes) out_shape[ax] += s[ax];
  HostTensor want(dtype, out_shape);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < ax; ++d) outer *= out_shape[d];
  for (size_t d = ax + 1; d < rank; ++d) inner *= out_shape[d];
  T* dst = want.data_as<T>();
  for (int64_t r = 0; r < outer; ++r) {
    for (const HostTensor& h : hosts) {
      const int64_t run = h.shape()[ax] * inner;
      for (int64_t k = 0; k < run; ++k) *dst++ = h.data_as<T>()[r * run + k];
    }
  }
  const Array out = concatenate(ptrs, c.axis);
  const std::string where =
      fmt::format("concatenate axis {} of {} inputs, first {} [{}]", c.axis, c.shapes.size(),
                  shape_to_string(c.shapes[0]), c.layouts[0]);
  if (out.layout() != TensorLayout::from_string(c.expected_layout).with_device_mesh(mesh)) {
    throw InternalError(fmt::format("{}: layout {} should be {}", where, out.layout().to_string(),
                                    c.expected_layout));
  }
  expect_equal_tensors<T>(out.gather(), want, where);
}

/// Every case, in F32 and F64, on mesh[data=2,model=4] of `rt`'s 8 devices.
inline void run_all_elementwise_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::vector<std::tuple<Shape, std::string, std::string>> binary_cases = {
      {{6, 10}, "None,None", "None,None"},
      {{6, 10}, "data,model", "data,model"},
      {{6, 10}, "data,model", "model,None"},
      {{6, 10}, "None,(data,model)", "data,None"},  // 10 over 8 devices: uneven
      {{3, 5, 7}, "data,None,model", "None,None,None"},
      {{3, 5, 7}, "None,model,data", "model,data,None"},
      {{0, 4}, "data,model", "None,None"},
  };
  const std::vector<ConcatCase> concat_cases = {
      {{{6, 3}, {6, 5}}, {"data,model", "None,None"}, -1, "layout[data,None]"},
      {{{2, 7}, {4, 7}, {1, 7}}, {"data,None", "model,None", "None,data"}, 0, "layout[None,None]"},
      {{{3, 2, 5}, {3, 4, 5}},
       {"model,None,data", "None,model,None"},
       1,
       "layout[model,None,data]"},
      {{{4, 0}, {4, 3}}, {"data,model", "None,model"}, 1, "layout[data,None]"},
  };
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const auto& [shape, la, lb] : binary_cases) {
      if (dtype == DType::kF32)
        check_binary_case<float>(rt, mesh, shape, la, lb, dtype, seed++);
      else
        check_binary_case<double>(rt, mesh, shape, la, lb, dtype, seed++);
    }
    for (const ConcatCase& c : concat_cases) {
      if (dtype == DType::kF32)
        check_concat_case<float>(rt, mesh, c, dtype, seed++);
      else
        check_concat_case<double>(rt, mesh, c, dtype, seed++);
      seed += 4;
    }
  }
}

}  // namespace meshlayout::testing
