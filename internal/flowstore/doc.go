// Package flowstore is the agent's flow history: a bounded ring of the node's newest
// flows, kept compact (flow.Record) and made flow.Flows when read, the live followers of `myelin observe --follow`, the Hubble
// Observer API and the service map, and the Sinks (flow metrics) that see every flow.
// It implements flow.Source. A follower that falls behind loses flows and is told
// so with a TypeLost record; the store never buffers more than its capacity plus a
// fixed amount per follower. Decoding the datapath's ring buffer records into flows
// (decode.go) and resolving their addresses to pods and Services (Resolver) live
// here too, so both are unit-tested without the kernel.
package flowstore
