# Sourced by tools/gate_throughput.sh and tools/oracle_scaling.sh (not run on
# its own). Processes that spin on the CPU beside a measurement, and the
# measurement's own child, both stopped however the script ends.
#   busy_count_ok TOOL VAR N
#                        whether N is a spinner count in 0..256; if not,
#                        says so on stderr as TOOL, naming VAR (then exit 2)
#   start_spinners N     N processes `sh -c 'while :; do :; done'`
#   run_child CMD ARGS   CMD in the background, waited for: a signal to the
#                        script then stops it too (bash defers a trap until a
#                        foreground command returns, so a TERM sent to the
#                        script would otherwise leave CMD running on its own,
#                        still writing into the output folder)
# On exit, INT, TERM and HUP: the running child and every spinner are
# killed; a signal ends the script with 128 + its number.
ng_spin=()
ng_child=""
ng_stop_children() {
  [ -z "$ng_child" ] || kill "$ng_child" 2>/dev/null
  [ ${#ng_spin[@]} -eq 0 ] || kill "${ng_spin[@]}" 2>/dev/null
  return 0
}
trap ng_stop_children EXIT
trap 'ng_stop_children; trap - EXIT; exit 129' HUP
trap 'ng_stop_children; trap - EXIT; exit 130' INT
trap 'ng_stop_children; trap - EXIT; exit 143' TERM
busy_count_ok() {
  [[ "$3" =~ ^[0-9]{1,3}$ ]] && [ "$3" -le 256 ] && return 0
  echo "$1: $2 '$3' is not a count of spinning processes in 0..256" >&2
  return 1
}
start_spinners() {
  local _
  for _ in $(seq 1 "$1"); do
    sh -c 'while :; do :; done' &
    ng_spin+=($!)
  done
}
run_child() {
  local rc=0
  "$@" &
  ng_child=$!
  wait "$ng_child" || rc=$?
  ng_child=""
  return "$rc"
}
