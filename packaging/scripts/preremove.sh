#!/bin/sh
# Herald: before the files are removed. Stops the service on removal, not on
# an upgrade (the new version's postinstall restarts it).
#   deb prerm: remove | upgrade NEW | deconfigure ... | failed-upgrade OLD
#   rpm %preun: 0 (erase) | 1 (upgrade)
set -e

if [ -d /run/systemd/system ]; then
	case "$1" in
	remove)
		# Kept enabled until purge, as Debian does: a reinstall starts it again.
		systemctl stop herald.service || true
		;;
	0)
		# rpm has no purge: disable now.
		systemctl --no-reload disable --now herald.service || true
		;;
	esac
fi
exit 0
