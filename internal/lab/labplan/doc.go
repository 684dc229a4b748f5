// Package labplan is the pure description of a lab: the options a user chooses
// (Options), the address plan (Addressing), the nodes laid out from both (Plan, Node),
// the names of everything the lab creates, the layout of the lab directory (Paths) and
// the iproute2 commands that build the network (Plan.NetworkSteps).
//
// It computes and never applies: nothing here needs root, touches the network or starts
// a process, so all of it is unit-tested as plain values. The lifecycle (package lab)
// and the CNI flavours (package cni and its sub-packages) apply what it plans.
package labplan
