#pragma once
// CPU threading. Every CPU kernel (and oneDNN) runs on one OpenMP runtime (GNU libgomp): never mix
// a pthread BLAS pool with it (reference/cpu-notes.md §5).
namespace hg {
int get_num_threads();
void set_num_threads(int n);  // n >= 1
}  // namespace hg
