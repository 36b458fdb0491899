// Every kernel table, defined once: each contract header's HG_KERNEL_TABLE lines become the accessors'
// definitions here (core/dispatch_table.h). A new family's contract header is added to this list.
#define HG_DEFINE_KERNEL_TABLES 1

#include "ops/kernels/conv.h"
#include "ops/kernels/dropout.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/fp8.h"
#include "ops/kernels/gemm.h"
#include "ops/kernels/loss.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/optim_rules.h"
#include "ops/kernels/pool.h"
#include "ops/kernels/reduce.h"
#include "ops/kernels/rounding.h"
#include "ops/kernels/scaler.h"
