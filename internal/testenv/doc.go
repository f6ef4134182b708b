// Package testenv holds preconditions shared by Herald's tests: root, tool,
// device and client checks that skip with a message naming what to install,
// and fail instead when HERALD_REQUIRE_ROOT_TESTS=1 or HERALD_REQUIRE_INTEROP=1
// (CI). Every such skip in the repository goes through Missing.
package testenv
