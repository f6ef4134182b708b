//go:build !linux

package mcdoctor

import "context"

func run(context.Context, Channel, Options) []Result {
	return []Result{{Check: CheckInterface, Status: Fail,
		Detail: "herald doctor reads Linux interfaces (/proc, netlink); this system is not Linux",
		Fix:    "run herald doctor on the Linux hosts of the channel"}}
}
