# hack/ceph/lib.sh - shared by up.sh, down.sh and demo.sh (sourced, not run).
#
# Layout of a cluster folder <dir> (everything of the cluster lives there):
#   .netns-pin-ceph        marker: down.sh removes only folders that have it
#   state                  names and PIDs (shell variables), written as they are made
#   env                    what tests and people use (shell variables, see up.sh)
#   ceph.conf              cluster configuration; every path in it is under <dir>
#   ceph.client.*.keyring  admin and test client keys
#   mon/ mgr/ osd/ mds/    daemon data (the OSD is a memstore: data lives in RAM)
#   run/ log/ crash/       sockets, PID files, logs

CEPH_PACKAGES=(ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common)
CEPH_CLIENT_NAME="netnspin"

CLOG_T0="$(date +%s%3N)"
clog() {
	local ms=$(($(date +%s%3N) - CLOG_T0))
	printf '[ceph %3d.%ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*" >&2
}
die() {
	clog "error: $*"
	exit 1
}

# abs_dir <dir>: absolute path without creating it.
abs_dir() {
	local d="$1"
	[[ -n "${d}" ]] || die "usage: $0 <dir>"
	[[ "${d}" == /* ]] || d="${PWD}/${d}"
	# squeeze // and trailing /
	d="$(printf '%s' "${d}" | tr -s /)"
	[[ "${d}" == / ]] || d="${d%/}"
	[[ "${d}" != / ]] || die "refusing to use / as the cluster folder"
	printf '%s' "${d}"
}

now_ms() { date +%s%3N; }

# pid_alive <pid> <dir>: the PID runs and is one of ours (its command line names
# <dir>), so a recycled PID is never signalled.
pid_alive() {
	local pid="$1" dir="$2" cmdline
	[[ "${pid}" =~ ^[0-9]+$ ]] || return 1
	# (SIGKILL on timeout: reading the command line of a process stuck on a dead
	# FUSE mount can block)
	cmdline="$(timeout -s KILL 2 tr '\0' ' ' 2>/dev/null <"/proc/${pid}/cmdline")" || return 1
	[[ "${cmdline}" == *"${dir}/"* ]]
}

# stop_pid <name> <pid> <dir> <seconds>: SIGTERM, poll until gone, then SIGKILL.
stop_pid() {
	local name="$1" pid="$2" dir="$3" secs="$4" deadline
	pid_alive "${pid}" "${dir}" || return 0
	kill -TERM "${pid}" 2>/dev/null || true
	deadline=$(($(now_ms) + secs * 1000))
	while pid_alive "${pid}" "${dir}"; do
		if (($(now_ms) > deadline)); then
			clog "${name} (pid ${pid}) still runs ${secs}s after SIGTERM: SIGKILL"
			kill -KILL "${pid}" 2>/dev/null || true
			deadline=$(($(now_ms) + 5000))
			while pid_alive "${pid}" "${dir}" && (($(now_ms) < deadline)); do sleep 0.05; done
			break
		fi
		sleep 0.05
	done
}

# load_state <dir>: source <dir>/state (names, PIDs) when present.
load_state() {
	# shellcheck disable=SC1091
	[[ -f "$1/state" ]] && . "$1/state"
	return 0
}

# state_set <dir> NAME VALUE: append (later lines win when sourced).
state_set() {
	printf '%s=%q\n' "$2" "$3" >>"$1/state"
}

# abort_fuse <mountpoint>: abort the FUSE connection of the mount (blocked
# calls on it return ECONNABORTED), through a private mount of fusectl. The
# way out of a client that can no longer answer: even SIGKILL does not end a
# ceph-fuse that deadlocked with a writer on its mount.
abort_fuse() {
	local dev ctl
	dev="$(awk -v m="$1" '$5 == m { d = $3 } END { print d }' /proc/self/mountinfo)"
	[[ "${dev}" == 0:* ]] || return 0
	ctl="$(mktemp -d /tmp/netns-pin-fusectl.XXXXXX)"
	if mount -t fusectl fusectl "${ctl}"; then
		[[ -e "${ctl}/${dev#0:}/abort" ]] && echo 1 >"${ctl}/${dev#0:}/abort"
		umount "${ctl}"
	fi
	rmdir "${ctl}"
}

# umount_fuse <mountpoint> <seconds>: umount; when it blocks (a dead client:
# umount(8) statfs-es the mount first), abort the FUSE connection, which ends
# it; then lazily unmount what is left.
umount_fuse() {
	local mp="$1" secs="$2" pid deadline
	umount "${mp}" 2>/dev/null &
	pid=$!
	deadline=$(($(now_ms) + secs * 1000))
	while kill -0 "${pid}" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.05; done
	if kill -0 "${pid}" 2>/dev/null; then
		clog "umount ${mp} blocked for ${secs}s: aborting its FUSE connection"
		abort_fuse "${mp}"
	fi
	wait "${pid}" 2>/dev/null || true
	if awk -v m="${mp}" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; then
		abort_fuse "${mp}"
		umount -l "${mp}" 2>/dev/null || true
	fi
}
