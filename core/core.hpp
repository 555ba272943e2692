// The tensor core in one include: tensors, creation, every op family and .npy interop.
#pragma once

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/index.hpp"
#include "core/ops/linalg.hpp"
#include "core/ops/reduce.hpp"
#include "core/ops/shape_ops.hpp"
#include "core/ops/softmax.hpp"
#include "core/serialize/npy.hpp"
#include "core/tensor.hpp"
