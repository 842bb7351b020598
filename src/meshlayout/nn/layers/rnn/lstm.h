// lstm.h — keras.layers.LSTM on distributed arrays, with its weights in an LSTMCell named
// "lstm_cell" built inside the LSTM (Keras 3 paths "lstm/lstm_cell/kernel", "/recurrent_kernel",
// "/bias"; Keras 2 object paths "lstm.cell.kernel", …). Keras defaults: tanh activation,
// sigmoid recurrent activation, gates ordered i, f, c, o; kernel (features, 4·units)
// glorot_uniform, recurrent_kernel (units, 4·units) orthogonal, bias (4·units) zeros with the
// forget gate's quarter ones (unit_forget_bias).
//
// Layout: the recurrence needs every gate of a row at each step, so the layer runs data
// parallel: the input keeps its batch sharding (its other dimensions whole), the three weights
// are brought whole to every device once per call (however the rules laid them out), and each
// device runs the whole sequence for its rows with no communication between steps. The output
// has the input's batch sharding. (A weight-sharded recurrence would need a collective per
// step; for the sizes LSTMs have, gathering the weights once moves fewer bytes.)
//
// Example:
//   Tensor in = Input({10, 16}, 32);                 // (batch, time, features)
//   auto lstm = std::make_shared<LSTM>(64, LSTMOptions{.return_sequences = true});
//   auto model = Model::functional(in, (*lstm)(in));  // → (32, 10, 64)
#pragma once

#include <memory>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct LSTMOptions {
  std::string name;  // automatic ("lstm", "lstm_1", …) when empty
  bool use_bias = true;
  bool unit_forget_bias = true;   // the forget gate's bias starts at one
  bool return_sequences = false;  // every step's output (batch, time, units), else the last
  Initializer kernel_initializer = Initializer::glorot_uniform();
  Initializer recurrent_initializer = Initializer::orthogonal();
  Initializer bias_initializer = Initializer::zeros();
};

/// keras.layers.LSTMCell: holds the weights; the LSTM layer runs the recurrence.
class LSTMCell : public Layer {
 public:
  LSTMCell(int64_t units, LSTMOptions options);
  int64_t units() const { return units_; }
  const VariablePtr& kernel() const { return kernel_; }
  const VariablePtr& recurrent_kernel() const { return recurrent_kernel_; }
  /// Null without use_bias.
  const VariablePtr& bias() const { return bias_; }
  Shape compute_output_shape(const Shape& input_shape) const override;

 protected:
  /// input_shape (batch, features).
  void build(const Shape& input_shape) override;
  /// ValueError: a cell runs inside an LSTM layer.
  Array call(const Array& x) override;

 private:
  int64_t units_;
  LSTMOptions options_;
  VariablePtr kernel_, recurrent_kernel_, bias_;
};

class LSTM : public Layer {
 public:
  /// ValueError unless units > 0.
  explicit LSTM(int64_t units, LSTMOptions options = {});
  const std::shared_ptr<LSTMCell>& cell() const { return cell_; }
  Shape compute_output_shape(const Shape& input_shape) const override;

 protected:
  /// ValueError (Keras' message) unless the input has rank 3 (batch, time, features).
  void build(const Shape& input_shape) override;
  /// ValueError if x is not F32/F64 or its features differ from the built ones.
  Array call(const Array& x) override;

 private:
  LSTMOptions options_;
  std::shared_ptr<LSTMCell> cell_;
};

}  // namespace meshlayout
