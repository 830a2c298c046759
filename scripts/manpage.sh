#!/usr/bin/env bash
# kvgate.1 from the binary's own help (`kvgate --help` and each command's), so the man page
# never disagrees with the flags. Usage: scripts/manpage.sh BIN OUT
set -euo pipefail
BIN=$1; OUT=$2
esc() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/"; }
{
  echo '.TH KVGATE 1 "" "kvgate" "User Commands"'
  echo '.SH NAME'
  echo 'kvgate \- inference-aware LLM gateway'
  echo '.SH SYNOPSIS'
  echo '.B kvgate'
  echo '\fIcommand\fR [\fIflags\fR]'
  echo '.SH DESCRIPTION'
  echo '.nf'
  "$BIN" --help 2>&1 | esc
  echo '.fi'
  for cmd in serve sim index ctl tokenize; do
    echo ".SH \"KVGATE ${cmd^^}\""
    echo '.nf'
    "$BIN" "$cmd" --help 2>&1 | esc || true
    echo '.fi'
  done
  echo '.SH FILES'
  echo '.TP'
  echo '.I /etc/kvgate/kvgate.conf'
  echo 'flags of the kvgate service (kvgate serve --config)'
  echo '.TP'
  echo '.I /var/lib/kvgate'
  echo 'the rule set and governance state'
  echo '.SH SEE ALSO'
  echo 'systemctl(1), the Grafana dashboard and alert rules in /usr/share/kvgate'
} >"$OUT"
