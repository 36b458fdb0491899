# Shared by the example smoke tests (tests/examples/*.sh); source it after defining `fail` and `$dir`.

# check_bad_flags EXE NAME ARGS...: each ARGS string (split on spaces) must make EXE exit with status 2
# and print NAME's usage line, e.g. check_bad_flags "$exe" amp_underflow "--steps x" "--bogus 1" "--out".
check_bad_flags() {
  local exe="$1" name="$2" bad rc
  shift 2
  for bad in "$@"; do
    set +e
    # shellcheck disable=SC2086
    "$exe" $bad >"$dir/bad" 2>&1
    rc=$?
    set -e
    [ "$rc" = 2 ] || { cp "$dir/bad" "$dir/log"; fail "'$bad' exited with $rc, not 2"; }
    grep -q "usage: $name" "$dir/bad" || { cp "$dir/bad" "$dir/log"; fail "'$bad' printed no usage"; }
  done
}
