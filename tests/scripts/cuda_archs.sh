#!/usr/bin/env bash
# CTest cuda_archs: which GPUs can run the CUDA backend this build made. A kernel runs on a GPU of compute
# capability T when the library holds its SASS for T's major version at a minor <= T's (sm_80 code runs on
# sm_86 and sm_89; arch-specific sm_90a only on sm_90), or its PTX for a capability <= T, which the driver
# compiles at load time. Fails when any kernel cannot run on one of the required capabilities, when no
# kernel is found, or when cuobjdump is missing (scripts/setup.sh installs it).
#   bash tests/scripts/cuda_archs.sh LIBRARY [CC...]     # CC: required capabilities, default 90 (H100/H200)
set -euo pipefail
lib="$1"
shift
required=("${@:-90}")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

tool=""
for c in "${HG_CUOBJDUMP:-}" "$(command -v cuobjdump || true)" /usr/local/cuda/bin/cuobjdump \
         "$root/.cuda-tools/bin/cuobjdump"; do
  if [ -n "$c" ] && [ -x "$c" ]; then tool="$c" && break; fi
done
if [ -z "$tool" ]; then
  echo "cuda_archs: FAILED: cuobjdump not found (HG_CUOBJDUMP, PATH, /usr/local/cuda/bin, .cuda-tools/bin);"
  echo "  run scripts/setup.sh, which installs it from PyPI (nvidia-cuda-cuobjdump) into .cuda-tools/"
  exit 1
fi
echo "cuda_archs: $lib, inspected with $tool"

# The code objects, e.g. "ELF file 3: libhalfgrad_cuda.3.sm_80.cubin", counted per kind and architecture.
"$tool" --list-elf --list-ptx "$lib" | awk '{n = split($NF, p, "."); c[$1 " " p[n - 1]]++}
  END {for (k in c) printf "  %s x%d\n", k, c[k]}' | sort

# One line per kernel and code object: "sass sm_80 NAME" or "ptx sm_90 NAME". (Without PTX, cuobjdump
# says "No PTX file found" on stderr: once, from the listing above, is enough.)
kernels="$(mktemp)" report="$(mktemp)"
trap 'rm -f "$kernels" "$report"' EXIT
# cuobjdump 13.2 writes "STT_FUNC STB_LOCAL STO_ENTRY name", 13.5 "FUNC LOCAL DEFAULT ENTRY name".
"$tool" --dump-elf-symbols "$lib" | awk '/^arch = / {arch = $3}
  $1 ~ /^(STT_)?FUNC$/ && / (STO_)?ENTRY / {print "sass", arch, $NF}' >"$kernels"
"$tool" --dump-ptx "$lib" 2>/dev/null | awk '/^arch = / {arch = $3}
  /\.entry[ \t]/ {name = $0; sub(/.*\.entry[ \t]+/, "", name); sub(/\(.*/, "", name); print "ptx", arch, name}' \
  >>"$kernels"

# For each capability: kernels that run as SASS, as PTX only, and not at all (missing are listed, demangled).
status=0
awk -v required="${required[*]}" -v targets="80 86 89 90 100 120 ${required[*]}" '
  function num(arch,   a) { a = arch; sub(/^sm_/, "", a); return a + 0 }
  function suffix(arch,   s) { s = arch; sub(/^sm_[0-9]+/, "", s); return s }
  function sass_runs(arch, t,   a) {
    a = num(arch)
    if (int(a / 10) != int(t / 10)) return 0
    return suffix(arch) == "a" ? a == t : a <= t
  }
  function ptx_runs(arch, t) { return num(arch) <= t && (suffix(arch) == "" || num(arch) == t) }
  { names[$3] = 1; code[$3] = code[$3] " " $1 ":" $2 }
  END {
    gpu[80] = "A100"; gpu[86] = "RTX 30xx, A10, A40"; gpu[89] = "L4, L40, RTX 40xx"; gpu[90] = "H100, H200"
    gpu[100] = "B200"; gpu[120] = "RTX 50xx"
    total = length(names)
    if (total == 0) { print "cuda_archs: FAILED: no kernel found in the library"; exit 1 }
    split(required, req, " "); for (i in req) is_req[req[i]] = 1
    nt = split(targets, ts, " "); failed = 0
    for (i = 1; i <= nt; ++i) {
      t = ts[i]; if (t in seen) continue; seen[t] = 1
      sass = 0; ptx = 0; missing = 0; example = ""
      for (k in names) {
        n = split(code[k], objs, " "); s = 0; p = 0
        for (j = 1; j <= n; ++j) {
          split(objs[j], kv, ":")
          if (kv[1] == "sass" && sass_runs(kv[2], t)) s = 1
          if (kv[1] == "ptx" && ptx_runs(kv[2], t)) p = 1
        }
        if (s) sass++; else if (p) ptx++; else { missing++; if (missing <= 3) example = example "\n    " k }
      }
      printf "  sm_%-4s %-20s %d/%d kernels run (%d SASS, %d PTX compiled by the driver)%s\n", t,
             "(" (t in gpu ? gpu[t] : "?") ")", sass + ptx, total, sass, ptx, (t in is_req ? ", required" : "")
      if (missing && (t in is_req)) {
        printf "cuda_archs: FAILED: %d kernels have no code sm_%s can run, e.g.:%s\n", missing, t, example
        print "  build with HG_CUDA_ARCHS including " t "-real or a PTX target <= " t " (e.g. " t "-virtual)"
        failed = 1
      }
    }
    exit failed
  }' "$kernels" >"$report" || status=$?
if command -v c++filt >/dev/null; then c++filt <"$report"; else cat "$report"; fi
[ "$status" -ne 0 ] || echo "cuda_archs: ok"
exit "$status"
