# Progress display for scripts/install.sh (sourced, not run): numbered steps with their expected
# time, each command's full output into a log file, a short line per package or compiled file on
# the screen, and a heartbeat whenever the screen has been quiet for a while, so that a slow step
# never looks like a hang.
#
#   source scripts/install_progress.sh
#   install_log_start /tmp/install.log
#   step "installing torch" "about 1 min"
#   run_step pip "installing torch" python -m pip install torch     # fails (status 1) if pip fails
#   step_done
#
# INSTALL_HEARTBEAT_S (default 20): seconds of silence before a heartbeat line;
# INSTALL_POLL_S (default 5): how often the silence is checked. Together: at most ~25 s between lines.

INSTALL_HEARTBEAT_S=${INSTALL_HEARTBEAT_S:-20}
INSTALL_POLL_S=${INSTALL_POLL_S:-5}
INSTALL_LOG=""
INSTALL_START=$SECONDS
STEP_NO=0
STEP_TOTAL=${STEP_TOTAL:-0}
STEP_START=$SECONDS
STEP_TIMES=()

# "1 min 05 s" / "42 s" for a number of seconds.
elapsed_text() {
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%d min %02d s' $((s / 60)) $((s % 60)); else printf '%d s' "$s"; fi
}

install_log_start() {
  INSTALL_LOG=$1
  : >"$INSTALL_LOG"
}

# step TITLE [EXPECTED]: announce the next numbered step and the time it usually takes.
step() {
  STEP_NO=$((STEP_NO + 1))
  STEP_START=$SECONDS
  echo "[$STEP_NO/$STEP_TOTAL] $1${2:+ ($2)}"
}

# step_done: the step's time, also kept for the summary (STEP_TIMES: "[n] 1 min 05 s").
step_done() {
  local took=$((SECONDS - STEP_START))
  STEP_TIMES+=("[$STEP_NO] $(elapsed_text "$took")")
  echo "      done in $(elapsed_text "$took")"
}

# _show MODE LINE: print the short form of one output line (nothing for noise); sets LAST_SHOWN.
_show() {
  local mode=$1 line=$2 out=""
  case "$mode" in
    pip)
      case "$line" in
        Collecting\ *) out=${line#Collecting }; out=${out%% (from *}; out=${out%% (*} ;;
        "Building wheel for "*:\ started) out="building ${line#Building wheel for }"; out=${out%%:*} ;;
        "Installing collected packages: "*)
          local list=${line#Installing collected packages: } commas
          commas=${list//[^,]/}
          out="unpacking $(( ${#commas} + 1 )) packages into the venv" ;;
        "Successfully installed "*)
          local names=${line#Successfully installed } spaces
          spaces=${names//[^ ]/}
          out="installed $(( ${#spaces} + 1 )) packages" ;;
        ERROR:*|error:*) out=$line ;;
      esac ;;
    ninja)   # torch's verbose JIT build: "[2/6] c++ ... -c /path/gn_cpu.cpp -o gn_cpu.o"
      case "$line" in
        \[[0-9]*/[0-9]*\]\ *)
          local counter=${line%%]*}] src=""
          NINJA_DONE=${counter#[}; NINJA_DONE=${NINJA_DONE%%/*}
          NINJA_TOTAL=${counter#*/}; NINJA_TOTAL=${NINJA_TOTAL%]}
          case "$line" in
            *" -c "*) src=${line##* -c }; src=${src%% *}; src=${src##*/} ;;
            *" -o "*) src=${line##* -o }; src=${src%% *}; src=${src##*/} ;;
          esac
          out="$counter ${src:-linking}" ;;
        *[Ee]rror*) out=$line ;;
      esac ;;
    *) out=$line ;;
  esac
  if [ -n "$out" ]; then
    echo "      $out"
    LAST_SHOWN=$SECONDS
  fi
}

# progress_lines MODE LABEL: read a command's output on stdin; print the short lines of MODE
# (pip: one per package; ninja: one per compiled file; all: every line) and, after
# INSTALL_HEARTBEAT_S quiet seconds, "... LABEL (elapsed)" (with "k of n compiled" for ninja).
progress_lines() {
  local mode=$1 label=$2 line partial="" start=$SECONDS rc extra
  LAST_SHOWN=$SECONDS
  NINJA_DONE="" NINJA_TOTAL=""
  while :; do
    if IFS= read -r -t "$INSTALL_POLL_S" line; then
      _show "$mode" "$partial$line"
      partial=""
    else
      rc=$?
      if [ "$rc" -gt 128 ]; then
        partial+=$line                           # timed out inside a line: keep its start
      else
        [ -n "$partial$line" ] && _show "$mode" "$partial$line"
        return 0                                 # end of input
      fi
    fi
    if [ $((SECONDS - LAST_SHOWN)) -ge "$INSTALL_HEARTBEAT_S" ]; then
      extra=""
      [ -n "$NINJA_TOTAL" ] && extra="; $NINJA_DONE of $NINJA_TOTAL compiled"
      echo "      ... $label ($(elapsed_text $((SECONDS - start))) so far$extra)"
      LAST_SHOWN=$SECONDS
    fi
  done
}

# run_step MODE LABEL CMD...: run CMD with its output appended to the log and shown through
# progress_lines. Returns CMD's status; on failure the log's last lines go to stderr.
run_step() {
  local mode=$1 label=$2 rc=0
  shift 2
  echo "\$ $*" >>"${INSTALL_LOG:-/dev/null}"
  "$@" 2>&1 | tee -a "${INSTALL_LOG:-/dev/null}" | progress_lines "$mode" "$label" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "install.sh: failed ($label, status $rc): $*" >&2
    if [ -n "$INSTALL_LOG" ]; then
      echo "install.sh: the last lines of $INSTALL_LOG:" >&2
      tail -n 25 "$INSTALL_LOG" >&2
    fi
  fi
  return "$rc"
}
