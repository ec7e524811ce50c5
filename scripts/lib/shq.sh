# scripts/lib/shq.sh (sourced): shq ARG... prints the ARGs as shell words
# that read back as exactly those ARGs, one space apart: a word of letters,
# digits and _ . / : = , @ % + ^ - as it is, any other in single quotes (a
# ' inside as '\''). What `printf %q` gives, without its backslashes before
# commas, spaces and quotes, so printed commands stay readable and paste
# back (--windows op=bwd,H=64 rather than op=bwd\,H=64).
shq() {
  local a sep=""
  for a in "$@"; do
    if [[ -n "$a" && "$a" =~ ^[A-Za-z0-9_./:=,@%+^-]+$ ]]; then
      printf '%s%s' "$sep" "$a"
    else
      printf "%s'%s'" "$sep" "${a//\'/\'\\\'\'}"
    fi
    sep=" "
  done
}
