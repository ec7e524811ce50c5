# scripts/lib/shq.sh (sourced): shq ARG... prints the ARGs as shell words
# that read back as exactly those ARGs, one space apart: a word of letters,
# digits and _ . / : = , @ % + ^ - as it is, a word holding a control
# character (newline, tab, ESC) as printf %q writes it ($'a\nb': it stays
# one line), any other in single quotes (a ' inside as '\''). Unlike a bare
# printf %q, commas, spaces and quotes get no backslashes, so printed
# commands stay readable and paste back (--windows op=bwd,H=64, not
# op=bwd\,H=64).
shq() {
  local a sep="" q="'\\''"
  for a in "$@"; do
    if [[ -n "$a" && "$a" =~ ^[A-Za-z0-9_./:=,@%+^-]+$ ]]; then
      printf '%s%s' "$sep" "$a"
    elif [[ "$a" == *[[:cntrl:]]* ]]; then
      printf '%s%q' "$sep" "$a"
    else
      printf "%s'%s'" "$sep" "${a//\'/$q}"
    fi
    sep=" "
  done
}
