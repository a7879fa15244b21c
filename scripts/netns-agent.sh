#!/bin/sh
# netns-agent.sh: an ssh replacement that "logs in" to a Linux network
# namespace on this machine, so that OpenMPI can treat namespaces as nodes.
#
#   mpirun --mca plm_rsh_agent scripts/netns-agent.sh -H 10.77.0.1:1,10.77.0.2:1 ...
#
# OpenMPI calls its launch agent like ssh: `agent [ssh options] HOST COMMAND...`
# (OpenMPI 4.1 passes `HOST orted -mca ess "env" ...`, with shell quoting in
# the words, and options only when plm_rsh_args adds some). Like ssh, the agent
# joins COMMAND's words with spaces and gives the line to a shell, here inside
# the namespace: `ip netns exec NS sh -c "COMMAND..."`. Unlike ssh, the
# command inherits the caller's environment (OMPI_* variables included).
#
# HOST (a `user@` prefix is ignored) names the namespace through
#   UT_NETNS_MAP="10.77.0.1=utns0,10.77.0.2=utns1"   (HOST=NAMESPACE pairs)
# or, when HOST is not in the map, HOST itself is the namespace's name.
# ssh options are accepted and ignored (the ones that take a value skip it).
# Exit status: the command's, or 255 (as ssh) when HOST maps to no namespace.
# Needs root (ip netns exec) and iproute2.
set -u

# skip ssh options: -x -q -T, -o Opt=val, -p 22, -l user, -oOpt=val, -xqT, --
while [ $# -gt 0 ]; do
    case $1 in
        --) shift; break ;;
        -?*) ;;
        *) break ;;
    esac
    flags=${1#-}
    shift
    while [ -n "$flags" ]; do
        c=${flags%"${flags#?}"}   # first letter
        flags=${flags#?}
        case $c in
            [BbcDEeFIiJLlmOoPpQRSWw])   # ssh options that take a value
                [ -z "$flags" ] && [ $# -gt 0 ] && shift   # value is the next word
                flags= ;;
        esac
    done
done

if [ $# -lt 2 ]; then
    echo "netns-agent: usage: $0 [ssh options] HOST COMMAND..." >&2
    exit 255
fi
host=${1##*@}
shift

# HOST -> namespace: UT_NETNS_MAP first, else HOST as the namespace's name
ns=
old_ifs=$IFS
IFS=,
for pair in ${UT_NETNS_MAP:-}; do
    [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
IFS=$old_ifs
[ -n "$ns" ] || ns=$host
if [ ! -e "/run/netns/$ns" ]; then
    echo "netns-agent: no network namespace for host '$host' (tried '$ns'; UT_NETNS_MAP='${UT_NETNS_MAP:-}')" >&2
    exit 255
fi

# as ssh: the words joined with spaces, run by a shell (which strips quotes)
IFS=' '
exec ip netns exec "$ns" sh -c "$*"
