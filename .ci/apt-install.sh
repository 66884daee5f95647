# Sourced by the .ci scripts that install a tool the tests need from Debian's packages (tcl.sh, arm-cross.sh).
#
#   apt_install NAME PKG...
#
# apt-get update, then apt-get install PKG... without recommends and without questions (through sudo unless root).
# Quiet: apt's output goes to a temporary log, printed to stderr only when it fails, followed by one line naming
# NAME and the packages; then it returns 1. The caller checks beforehand that a tool is missing (apt runs only then)
# and afterwards that the tools are there.
apt_install() {
    local name="$1"
    shift
    local sudo=() log
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log="$(mktemp)"
    if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
           "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } \
            >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "$name: apt-get could not install $*" >&2
        return 1
    fi
    rm -f "$log"
}
