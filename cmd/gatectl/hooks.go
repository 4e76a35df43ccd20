package main

import (
	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
)

// snapshotHooks are the chain hooks of optional components.
func snapshotHooks(logger hclog.Logger) []snapshot.ChainHook { return nil }
