#!/usr/bin/env bash
# Makes the access tokens of a pshard deployment on Kubernetes and prints the
# three Secrets that the manifests mount, as YAML for `kubectl apply -f -`:
#
#   pshard-auth           tokens: the servers' --auth_tokens file, SHA-256
#                         digests only ("sha256:<hex> NAME ROLE" per line)
#   pshard-worker-tokens  one key per worker pod (pshard-worker-0, ...): that
#                         worker's own token (role worker, principal = the
#                         pod name = the worker's --name)
#   pshard-client-token   token: the clients' token (pshardctl, the example
#                         Job), role admin unless --client-role says otherwise
#
# usage: make_access_secrets.sh --workers N [--namespace NS]
#            [--statefulset NAME] [--client-name NAME]
#            [--client-role admin|submit|read] [--out DIR]
#
#   make_access_secrets.sh --workers 2 | kubectl apply -f -
#
# --workers is the most replicas the StatefulSet will have: a pod without a
# token of its own cannot register. --out DIR (a new or empty directory) also
# keeps the files: DIR/tokens, DIR/client.token, DIR/worker-tokens/<pod>
# (mode 0600, DIR 0700); without it they are made in a temporary directory
# and removed. Tokens are `openssl rand -hex 32` (256 bits; pshardctl has no
# token command); their digests are what `sha256sum` prints for the token's
# bytes, the form security/tokens.h reads. Tokens appear only in the Secrets
# on standard output (and in --out); messages go to standard error and never
# hold one. Exit status: 0 done, 2 bad arguments, 1 anything else.
set -euo pipefail
umask 077

prog="make_access_secrets"

usage() {
  sed -n '/^# usage:/,/^#$/p' "$0" | sed 's/^# \{0,1\}//' >&2
}

die_usage() {
  echo "$prog: $1" >&2
  echo "$prog: usage: make_access_secrets.sh --workers N [--namespace NS] [--statefulset NAME] [--client-name NAME] [--client-role admin|submit|read] [--out DIR]" >&2
  exit 2
}

die() {
  echo "$prog: $1" >&2
  exit 1
}

workers=""
namespace="pshard"
statefulset="pshard-worker"
client_name="pshardctl"
client_role="admin"
out=""

# Both --flag VALUE and --flag=VALUE.
while [ $# -gt 0 ]; do
  arg="$1"
  case "$arg" in
    -h|--help)
      usage
      exit 0
      ;;
    --*=*)
      flag="${arg%%=*}"
      value="${arg#*=}"
      shift
      ;;
    --*)
      flag="$arg"
      if [ $# -lt 2 ]; then
        die_usage "$flag needs a value"
      fi
      value="$2"
      shift 2
      ;;
    *)
      die_usage "unexpected argument \"$arg\""
      ;;
  esac
  case "$flag" in
    --workers) workers="$value" ;;
    --namespace) namespace="$value" ;;
    --statefulset) statefulset="$value" ;;
    --client-name) client_name="$value" ;;
    --client-role) client_role="$value" ;;
    --out) out="$value" ;;
    *) die_usage "unknown flag $flag" ;;
  esac
done

if [ -z "$workers" ]; then
  die_usage "--workers is required (the most replicas the worker StatefulSet will have)"
fi
if ! [[ "$workers" =~ ^[1-9][0-9]{0,3}$ ]] || [ "$workers" -gt 1000 ]; then
  die_usage "--workers=$workers: want a whole number from 1 to 1000"
fi
# A DNS-1123 label, as Kubernetes wants of a namespace.
if ! [[ "$namespace" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]]; then
  die_usage "--namespace=$namespace: not a DNS-1123 label (lower-case letters, digits and '-', at most 63)"
fi
# The StatefulSet's pods are <name>-<ordinal>, which must be DNS labels too
# and valid Secret keys.
if ! [[ "$statefulset" =~ ^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$ ]]; then
  die_usage "--statefulset=$statefulset: not a DNS-1123 label of at most 52 characters"
fi
# One word: the token file's fields are separated by spaces.
if ! [[ "$client_name" =~ ^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$ ]]; then
  die_usage "--client-name=$client_name: want letters, digits, '.', '_', '@' or '-' (at most 128, no spaces)"
fi
case "$client_role" in
  admin|submit|read) ;;
  *) die_usage "--client-role=$client_role: want admin, submit or read" ;;
esac
if [[ "$client_name" =~ ^${statefulset}-[0-9]+$ ]]; then
  die_usage "--client-name=$client_name: that is a worker pod's name"
fi

for tool in openssl sha256sum base64; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

if [ -n "$out" ]; then
  if [ -e "$out" ] && { [ ! -d "$out" ] || [ -n "$(ls -A "$out")" ]; }; then
    die_usage "--out=$out: exists and is not an empty directory (it would mix old and new tokens)"
  fi
  mkdir -p "$out" || die "cannot make $out"
  chmod 0700 "$out"
  dir="$out"
else
  dir="$(mktemp -d "${TMPDIR:-/tmp}/pshard-access-XXXXXX")"
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir/worker-tokens"

# A new token to the file $1 (0600). The token goes through pipes and
# builtins only, never a command line (which ps shows).
new_token() {
  openssl rand -hex 32 >"$1" || die "openssl rand failed"
  chmod 0600 "$1"
  [[ "$(cat "$1")" =~ ^[0-9a-f]{64}$ ]] || die "openssl rand gave no 64 hex digits"
}

# The "sha256:<hex>" of the token in file $1 (its bytes without the newline,
# as pshard hashes the token it is sent).
digest_of() {
  local token hex
  token="$(cat "$1")"
  hex="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
  printf 'sha256:%s' "$hex"
}

tokens="$dir/tokens"
{
  echo "# sha256:<digest of the token> principal role (make_access_secrets.sh)"
  new_token "$dir/client.token"
  echo "$(digest_of "$dir/client.token") $client_name $client_role"
  for ((i = 0; i < workers; i++)); do
    pod="$statefulset-$i"
    new_token "$dir/worker-tokens/$pod"
    echo "$(digest_of "$dir/worker-tokens/$pod") $pod worker"
  done
} >"$tokens"
chmod 0600 "$tokens"

b64() {
  base64 -w0 <"$1"
}

secret_header() {
  cat <<EOF
---
apiVersion: v1
kind: Secret
metadata:
  name: $1
  namespace: $namespace
  labels:
    app.kubernetes.io/name: pshard
    app.kubernetes.io/part-of: pshard
  annotations:
    pshard.io/made-by: make_access_secrets.sh
type: Opaque
data:
EOF
}

{
  echo "# pshard access Secrets: $workers worker token(s) for StatefulSet $statefulset, client \"$client_name\" ($client_role)."
  echo "# Holds tokens: pipe it to kubectl apply -f -, do not keep it in a repository."
  secret_header pshard-auth
  echo "  tokens: $(b64 "$tokens")"
  secret_header pshard-worker-tokens
  for ((i = 0; i < workers; i++)); do
    pod="$statefulset-$i"
    echo "  $pod: $(b64 "$dir/worker-tokens/$pod")"
  done
  secret_header pshard-client-token
  echo "  token: $(b64 "$dir/client.token")"
}

echo "$prog: made a token for \"$client_name\" (role $client_role) and $workers worker token(s) ($statefulset-0 .. $statefulset-$((workers - 1))) in namespace $namespace${out:+; files in $out}" >&2
