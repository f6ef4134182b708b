// Package interop holds only tests: they run real third-party STOMP clients
// shipped by Debian (stomp.py from python3-stomp; stompcat, catstomp and the
// stomp gem from ruby-stomp) as child processes against an in-process Herald
// broker with a real SQLite journal, and check what both sides saw.
//
// A missing client skips its test with the Debian package to install, unless
// HERALD_REQUIRE_INTEROP=1, which turns the skip into a failure. stomp.py is
// run with $HERALD_PYTHON if set, else /usr/bin/python3 (a pyenv python3 on
// PATH does not see Debian's dist-packages).
package interop
