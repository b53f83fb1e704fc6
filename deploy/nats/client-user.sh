#!/bin/sh
# Writes one client user for deploy/nats/parley.conf (a line for its `users` list): the
# client role, receiving only on its own inbox prefix `_INBOX_<NAME>`.
#
#   deploy/nats/client-user.sh NAME              password user; the server reads the
#                                                password from $PARLEY_NATS_<NAME>_PASSWORD
#                                                (upper case, '-' as '_')
#   deploy/nats/client-user.sh --nkey NAME UKEY  NKey user (public key U...)
#
# The client connects as `nats://NAME:PASSWORD@host:4222` (the CLI and `parley serve`
# derive the inbox prefix `_INBOX_NAME` from the user name), or with
# `--nats-creds SEEDFILE --nats-inbox-prefix _INBOX_NAME` for an NKey user.
#
# NAME: 1 to 32 letters, digits, '_' or '-' (it becomes a subject token); the names of
# the service users are refused.
set -eu

usage() {
    echo "usage: $0 NAME | $0 --nkey NAME UKEY" >&2
    exit 2
}

nkey=""
if [ "${1:-}" = "--nkey" ]; then
    [ $# -eq 3 ] || usage
    name="$2"
    nkey="$3"
else
    [ $# -eq 1 ] || usage
    name="$1"
fi

case "$name" in
    "" | *[!A-Za-z0-9_-]*)
        echo "error: user name '$name': letters, digits, '_' and '-' only" >&2
        exit 2
        ;;
esac
if [ "${#name}" -gt 32 ]; then
    echo "error: user name '$name': at most 32 characters" >&2
    exit 2
fi
case "$name" in
    coordinator | agent-worker | judge-worker | serve | agent_worker | judge_worker)
        echo "error: '$name' is a service user of parley.conf; choose another name" >&2
        exit 2
        ;;
esac
if [ -n "$nkey" ]; then
    case "$nkey" in
        U*) ;;
        *)
            echo "error: '$nkey' is not an NKey user public key (U...)" >&2
            exit 2
            ;;
    esac
    case "$nkey" in
        *[!A-Z0-9]*)
            echo "error: '$nkey' is not an NKey user public key (U...)" >&2
            exit 2
            ;;
    esac
fi

# The client role's subjects (see "The client role" in parley.conf) plus its own follow subject,
# `parley.debates.follow.NAME`: the identity its event followers are counted against.
publish='"parley.debates.submit", "parley.debates.status", "parley.debates.retry", "parley.debates.cancel", "parley.debates.answer", "parley.debates.steer", "parley.debates.contribute", "parley.debates.fork", "parley.debates.feedback", "parley.debates.calibration", "parley.evals.submit", "$JS.API.CONSUMER.MSG.NEXT.PARLEY_EVENTS.*", "$JS.API.CONSUMER.INFO.PARLEY_EVENTS.*"'
permissions="permissions: {publish: {allow: [${publish}, \"parley.debates.follow.${name}\"]}, subscribe: {allow: [\"_INBOX_${name}.>\"]}}"
if [ -n "$nkey" ]; then
    echo "{nkey: ${nkey}, ${permissions}}"
else
    var="PARLEY_NATS_$(echo "$name" | tr 'a-z-' 'A-Z_')_PASSWORD"
    echo "{user: ${name}, password: \$${var}, ${permissions}}"
fi
