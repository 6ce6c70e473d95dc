#!/usr/bin/env bash
# Compares the device code of two CUDA builds kernel by kernel: `cuobjdump -sass` of every object, split by
# function, keyed by (architecture, demangled name), and the instruction streams diffed. Kernels may move between
# files (the key has no file in it; an anonymous namespace demangles the same in every translation unit), but
# every kernel's SASS must match. Use it to show that a refactoring of engine/cuda changed no device code
# (docs/engine.md, "Where the kernels live").
#
# usage: scripts/sass-compare.sh OLD NEW
#   OLD, NEW: a build folder (its engine/**/*.cu.o objects are taken), or object files / static libraries
#   (a comma-separated list). Exit status 0 when every kernel of either side exists on the other with identical
#   SASS; 1 otherwise (the differing and missing kernels are listed; SASS_DIFF=1 prints the first diff).
# Needs cuobjdump (CUDA toolkit) and python3; cu++filt or c++filt to demangle.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: scripts/sass-compare.sh OLD NEW   (build folders, object files or libraries, comma-separated)" >&2
  exit 2
fi
if ! command -v cuobjdump > /dev/null; then
  echo "sass-compare: cuobjdump not found (add the CUDA toolkit's bin, or PyPI nvidia-cuda-cuobjdump and" \
    "nvidia-cuda-nvdisasm, to PATH)" >&2
  exit 2
fi
demangler=$(command -v cu++filt || command -v c++filt || true)
[[ -n $demangler ]] || { echo "sass-compare: neither cu++filt nor c++filt found" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The objects of one side, one per line.
objects() {
  local side=$1
  if [[ -d $side ]]; then
    find "$side" -path '*/engine/*' -name '*.cu.o' | sort
  else
    tr ',' '\n' <<< "$side"
  fi
}

# Dumps one side's SASS into $work/$2.sass (objects in a fixed order; the split below keys by function).
dump() {
  local list count=0
  list=$(objects "$1")
  [[ -n $list ]] || { echo "sass-compare: no objects in $1" >&2; exit 2; }
  : > "$work/$2.sass"
  while IFS= read -r f; do
    [[ -f $f ]] || { echo "sass-compare: $f is not a file" >&2; exit 2; }
    cuobjdump -sass "$f" >> "$work/$2.sass"
    count=$((count + 1))
  done <<< "$list"
  echo "$count" > "$work/$2.objects"
}
dump "$1" old
dump "$2" new

python3 - "$work" "$demangler" "$1" "$2" <<'PY'
import difflib, os, re, subprocess, sys
work, demangler, old_name, new_name = sys.argv[1:5]

def split(path):
    """{(arch, mangled name): [instruction lines]} of one cuobjdump -sass listing."""
    functions, arch, key = {}, "?", None
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"\s*code for (sm_\w+)", line)
        if m:
            arch, key = m.group(1), None
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            key = (arch, m.group(1))
            if key in functions:
                sys.exit(f"sass-compare: {key[1]} ({arch}) appears twice in one side's objects")
            functions[key] = []
            continue
        if key is None:
            continue
        if re.match(r"\s*\.{6,}\s*$", line):  # end of the function's listing
            key = None
            continue
        if line.strip():
            functions[key].append(" ".join(line.split()))
    return functions

old, new = split(os.path.join(work, "old.sass")), split(os.path.join(work, "new.sass"))
names = sorted({k[1] for k in old} | {k[1] for k in new})
plain = subprocess.run([demangler], input="\n".join(names), capture_output=True, text=True,
                       check=True).stdout.split("\n")
demangled = dict(zip(names, plain))

def by_demangled(functions):
    out = {}
    for (arch, name), lines in functions.items():
        key = (arch, demangled[name])
        if key in out:
            sys.exit(f"sass-compare: two functions demangle to {key[1]} ({arch})")
        out[key] = lines
    return out

old, new = by_demangled(old), by_demangled(new)
same = [k for k in sorted(old) if k in new and old[k] == new[k]]
differ = [k for k in sorted(old) if k in new and old[k] != new[k]]
only_old = [k for k in sorted(old) if k not in new]
only_new = [k for k in sorted(new) if k not in old]
objects = [open(os.path.join(work, s + ".objects")).read().strip() for s in ("old", "new")]
print(f"sass-compare: {old_name} ({objects[0]} objects, {len(old)} functions) vs {new_name} "
      f"({objects[1]} objects, {len(new)} functions)")
print(f"  identical: {len(same)}   differing: {len(differ)}   only in old: {len(only_old)}   "
      f"only in new: {len(only_new)}")
for title, keys in (("differing", differ), ("only in old", only_old), ("only in new", only_new)):
    for arch, name in keys:
        print(f"  {title}: [{arch}] {name}")
if differ and os.environ.get("SASS_DIFF") == "1":
    k = differ[0]
    sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(old[k], new[k], "old", "new", n=2))
sys.exit(0 if not (differ or only_old or only_new) else 1)
PY
