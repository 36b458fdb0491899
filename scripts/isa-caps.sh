#!/usr/bin/env bash
# The lower CPU paths, proven on whatever CPU this is. Each ISA cap limits oneDNN (DNNL_MAX_CPU_ISA) and
# halfgrad's own loops and conversions (HG_CONVERT_ISA) to what an older CPU has:
#   avx512_core_bf16  AVX-512 with BF16 dot products (Cooper Lake, Zen 4): native BF16 GEMM/conv
#   avx512_core       AVX-512 without BF16 (Skylake-SP .. Ice Lake): BF16 widened to F32
#   avx2              AVX2 + FMA + F16C (Haswell .. Zen 3): BF16 and F16 widened, AVX2 loops
#   baseline          x86-64 with SSE4.1: oneDNN's SSE4.1 kernels, scalar conversions, baseline loops
#
#   scripts/isa-caps.sh --table [BUILD]     # ISA cap x dtype -> GEMM / conv / conversion engine, for this
#                                           # CPU and every cap below it it can run; names the caps it cannot
#   scripts/isa-caps.sh --test CAP [BUILD [FILTER]]  # hg_tests (only the Catch2 FILTER's tests when given)
#                                           # and the examples' BF16/F16 smoke runs under CAP; exit 77
#                                           # (CTest: skipped) when CAP is not below this CPU's level
# BUILD is the build folder (default: build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
caps=(avx512_core_bf16 avx512_core avx2 baseline)

flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
# The CPU's level: the first cap (from the top) whose features it has.
level_of_cpu() {
  if has amx_bf16 avx512_bf16; then echo amx
  elif has avx512_bf16 avx512f avx512bw avx512vl avx512dq; then echo avx512_core_bf16
  elif has avx512f avx512bw avx512vl avx512dq; then echo avx512_core
  elif has avx2 fma f16c; then echo avx2
  else echo baseline; fi
}
rank() { case "$1" in amx) echo 5 ;; avx512_core_bf16) echo 4 ;; avx512_core) echo 3 ;; avx2) echo 2 ;; *) echo 1 ;; esac; }
needs() {
  case "$1" in
    avx512_core_bf16) echo "avx512_bf16 (with AVX-512 F/BW/VL/DQ)" ;;
    avx512_core) echo "AVX-512 F/BW/VL/DQ" ;;
    avx2) echo "avx2, fma and f16c" ;;
    *) echo "sse4_1" ;;
  esac
}
cap_env() {
  case "$1" in
    avx512_core_bf16) echo "DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 HG_CONVERT_ISA=avx512" ;;
    avx512_core) echo "DNNL_MAX_CPU_ISA=AVX512_CORE HG_CONVERT_ISA=avx512" ;;
    avx2) echo "DNNL_MAX_CPU_ISA=AVX2 HG_CONVERT_ISA=f16c" ;;
    baseline) echo "DNNL_MAX_CPU_ISA=SSE41 HG_CONVERT_ISA=scalar" ;;
    *) echo "unknown cap '$1' (one of: ${caps[*]})" >&2; exit 2 ;;
  esac
}
cpu_level="$(level_of_cpu)"
model="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || echo unknown)"

table() {
  local build="$1" out skipped=()
  out="$(mktemp)"
  "$build/cpu_engines" --rows "none ($cpu_level)" >>"$out"
  for cap in "${caps[@]}"; do
    if [ "$(rank "$cap")" -ge "$(rank "$cpu_level")" ]; then
      [ "$(rank "$cap")" -gt "$(rank "$cpu_level")" ] && skipped+=("$cap (needs $(needs "$cap"))")
      continue
    fi
    env $(cap_env "$cap") "$build/cpu_engines" --rows "$cap" >>"$out"
  done
  echo "ISA caps on $model (level $cpu_level): the engine each dtype runs"
  # aligned columns with awk alone (column(1) is not on every machine: bsdextrautils on Debian)
  { printf 'cap\tdtype\tGEMM\tconv2d\tconversions\tloops\n'; cat "$out"; } | awk -F'\t' '
    { for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n[NR] = NF }
    END { for (r = 1; r <= NR; r++) { line = ""
            for (i = 1; i <= n[r]; i++) line = line (i < n[r] ? sprintf("%-" w[i] + 2 "s", cell[r, i]) : cell[r, i])
            print line } }'
  if [ ${#skipped[@]} -gt 0 ]; then
    echo "caps this machine could not run (its CPU lacks the instructions):"
    printf '  %s\n' "${skipped[@]}"
  fi
  rm -f "$out"
}

run_tests() {
  local cap="$1" build="$2" filter="${3:-}"
  cap_env "$cap" >/dev/null
  if [ "$(rank "$cap")" -gt "$(rank "$cpu_level")" ]; then
    echo "isa-caps: this CPU ($model, level $cpu_level) cannot run cap $cap: it lacks $(needs "$cap")"
    exit 77
  fi
  if [ "$(rank "$cap")" -eq "$(rank "$cpu_level")" ]; then
    echo "isa-caps: cap $cap is this CPU's own level; the normal test run covers it"
    exit 77
  fi
  # shellcheck disable=SC2046  # the cap's assignments are meant to split
  export $(cap_env "$cap")
  echo "isa-caps: cap $cap ($(cap_env "$cap"))"
  "$build/cpu_engines"
  if [ -n "$filter" ]; then "$build/tests/hg_tests" "$filter"; else "$build/tests/hg_tests"; fi
  local data="${HG_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
  if [ -d "$data" ]; then
    local amp
    for amp in bf16 fp16; do
      "$build/fashion_mnist_mlp" --amp "$amp" --epochs 1 --limit 2000 --max-steps 30 --threads 2 --data "$data"
    done
    "$build/fashion_mnist_cnn" --amp bf16 --epochs 1 --limit 512 --max-steps 4 --threads 2 --data "$data"
  else
    echo "isa-caps: no Fashion-MNIST in $data: example smoke runs not done"
  fi
}

case "${1:-}" in
  --table) table "${2:-$root/build}" ;;
  --test) [ $# -ge 2 ] || { echo "usage: $0 --test CAP [BUILD]" >&2; exit 2; }; run_tests "$2" "${3:-$root/build}" "${4:-}" ;;
  *) echo "usage: $0 --table [BUILD] | --test CAP [BUILD]" >&2; exit 2 ;;
esac
