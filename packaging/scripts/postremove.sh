#!/bin/sh
# Herald: after the files are removed. Never deletes /var/lib/herald: it holds
# the journal, the user's messages. The herald user stays too (files may still
# belong to it).
#   deb postrm: remove | purge | upgrade NEW | disappear | abort-install | ...
#   rpm %postun: 0 (erase) | 1 (upgrade)
set -e

case "$1" in
purge)
	# The unit file is gone, so "systemctl disable" cannot find it: remove the
	# links "systemctl enable" made.
	rm -f /etc/systemd/system/multi-user.target.wants/herald.service
	if [ -d /var/lib/herald ]; then
		echo "herald: kept /var/lib/herald (the message journal); delete it yourself if you no longer need it" >&2
	fi
	;;
esac

case "$1" in
remove | purge | 0)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
exit 0
