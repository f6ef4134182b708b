// Package testenv holds preconditions shared by Herald's tests: root and
// tool checks that skip with a message naming what to install, and fail
// instead when HERALD_REQUIRE_ROOT_TESTS=1 (CI).
package testenv
