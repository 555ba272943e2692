// The tensor core in one include: tensors, creation, every op family, autograd and .npy interop.
#pragma once

#include "core/autograd/engine.hpp"
#include "core/autograd/function.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/index.hpp"
#include "core/ops/linalg.hpp"
#include "core/ops/quantize.hpp"
#include "core/ops/reduce.hpp"
#include "core/ops/shape_ops.hpp"
#include "core/ops/softmax.hpp"
#include "core/ops/window.hpp"
#include "core/serialize/npy.hpp"
#include "core/tensor.hpp"
