// progress.h — Keras' per-epoch progress output for fit/evaluate (keras.utils.Progbar):
//   verbose 1 on a terminal  "Epoch 1/3" then "4/4 ━━━━━━━━━━━━━━━━━━━━ 0s 3ms/step - loss:
//   0.5000",
//                            redrawn in place ('\r') after every step;
//   verbose 1 otherwise, 2   "Epoch 1/3" then one line "4/4 - 0s - 3ms/step - loss: 0.5000";
//   verbose 0                nothing.
// The loss shown is the running mean of the epoch so far (Keras' loss tracker). Only process 0
// writes (the trainer passes enabled = false elsewhere).
//
// Example:
//   EpochProgress bar(std::cerr, progress_mode(1), /*epoch=*/0, /*epochs=*/3, /*steps=*/4);
//   bar.update(1, 0.52);  …  bar.finish(0.5);
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace meshlayout {

enum class ProgressMode { kSilent, kBar, kLine };

/// True when stderr is a terminal and TERM is not "dumb".
bool stderr_is_a_terminal();

/// Keras' verbose: 0 silent; 1 ("auto") a bar on a terminal (`terminal`), else one line per
/// epoch; 2 one line per epoch. ValueError for another value.
ProgressMode progress_mode(int verbose, bool terminal = stderr_is_a_terminal());

class EpochProgress {
 public:
  /// Prints "Epoch e/E" at once unless silent (epochs == 0: no header, as evaluate).
  EpochProgress(std::ostream& out, ProgressMode mode, int64_t epoch, int64_t epochs, int64_t steps);
  /// After step `done` (1-based) with the running mean loss.
  void update(int64_t done, double mean_loss);
  /// Ends the epoch's output with its final mean loss.
  void finish(double mean_loss);

  /// The bar line without '\r' (exposed for tests): "done/steps ━━━━──── 0s 3ms/step - loss: x".
  static std::string render_bar(int64_t done, int64_t steps, double seconds, double mean_loss,
                                int width = 20);
  /// The verbose-2 line: "steps/steps - 0s - 3ms/step - loss: x".
  static std::string render_line(int64_t steps, double seconds, double mean_loss);

 private:
  double seconds() const;
  std::ostream& out_;
  ProgressMode mode_;
  int64_t steps_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace meshlayout
