#pragma once
// Moved to core/parallel.h (parallel_for, parallel_ranges: exceptions carried out of the region).
#include "core/parallel.h"
