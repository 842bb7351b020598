// optimizers.h — every optimizer of this library, for code that constructs one by its class:
// SGD, Adam, AdamW, RMSprop, Adagrad, Lion, Adafactor. make_optimizer (optimizer.h) needs none of
// them.
//
// Example:
//   #include "meshlayout/train/optimizers.h"
//   RMSprop opt({.momentum = 0.9});
#pragma once

#include "meshlayout/train/adafactor.h"
#include "meshlayout/train/adagrad.h"
#include "meshlayout/train/adam.h"
#include "meshlayout/train/adamw.h"
#include "meshlayout/train/lion.h"
#include "meshlayout/train/optimizer.h"
#include "meshlayout/train/rmsprop.h"
#include "meshlayout/train/sgd.h"
