package main

// Temporary: the real listen command is being written in listen.go. Delete
// this file when it lands.

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func listenCommand() *cli.Command {
	return &cli.Command{
		Name:  "listen",
		Usage: "receive a multicast channel (not built yet)",
		Action: func(cCtx *cli.Context) error {
			return fmt.Errorf("listen: not built yet")
		},
	}
}
