#!/bin/sh
# A bad file in headless mode: flashot-gui exits with status 1 and a message naming the file, and writes no
# screenshot. usage: headless_bad_file.sh XVFB_RUN GUI SCREENSHOT MISSING_FILE
# The GUI's own exit status is recorded inside the X session: xvfb-run's exit status is not the test's, since its
# cleanup can fail ("problem while cleaning up temporary directory") while other xvfb-run instances of a parallel
# ctest run share /tmp, which made this test fail with a GUI that had done everything right.
set -u
xvfb=$1 gui=$2 shot=$3 missing=$4
rm -f "$shot" "$shot.err" "$shot.code"
"$xvfb" -a sh -c '"$0" "$1" --screenshot "$2" 2> "$2.err"; echo $? > "$2.code"' "$gui" "$missing" "$shot"
code=$(cat "$shot.code" 2>/dev/null || echo "none (the GUI did not run)")
if [ "$code" != 1 ]; then
  echo "flashot-gui exited with $code, expected 1"
  cat "$shot.err" 2>/dev/null
  exit 1
fi
if ! grep -q "$(basename "$missing")" "$shot.err"; then
  echo "flashot-gui's message does not name $missing:"
  cat "$shot.err"
  exit 1
fi
if [ -e "$shot" ]; then
  echo "flashot-gui wrote a screenshot for a bad file: $shot"
  exit 1
fi
