#pragma once
// The whole nn/ API: Module, layers, Sequential, ModuleList, ModuleDict, init, DistributedDataParallel.
#include "nn/activation.h"
#include "nn/containers.h"
#include "nn/ddp.h"
#include "nn/flatten.h"
#include "nn/fp8_linear.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "nn/utils.h"
