#!/bin/sh
# Herald: before the files are unpacked. Creates the herald system user and
# group (the packaged files and /var/lib/herald belong to them).
#   deb preinst: install [OLD] | upgrade OLD | abort-upgrade NEW
#   rpm %pre:    1 (install) | 2 (upgrade)
set -e

create_user() {
	if getent passwd herald >/dev/null 2>&1; then
		return 0
	fi
	if command -v systemd-sysusers >/dev/null 2>&1; then
		# The same line as /usr/lib/sysusers.d/herald.conf, which is not unpacked yet.
		echo 'u herald - "Herald message appliance" /var/lib/herald -' |
			systemd-sysusers --replace=/usr/lib/sysusers.d/herald.conf -
		return 0
	fi
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	getent group herald >/dev/null 2>&1 || groupadd --system herald
	useradd --system --gid herald --home-dir /var/lib/herald --no-create-home \
		--shell "$nologin" --comment "Herald message appliance" herald
}

case "$1" in
install | upgrade | [0-9]*)
	create_user
	;;
esac
exit 0
