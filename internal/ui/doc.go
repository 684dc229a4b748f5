// Package ui is the service map: one page, served by an http.Handler over a
// flow.Source, that draws namespaces, pods and Services as a graph with an edge per
// source → destination seen in recent flows (dropped traffic in red) and a flow table
// below that follows live. The page (HTML, CSS, vanilla JavaScript, embedded with
// go:embed) fetches nothing from the internet; it reads the flows as server-sent
// events from api/flows. The server keeps nothing per page but the stream it is
// writing, ends a stream whose client takes no write for 30 s, and holds 16 streams
// per source address (32 in all); the page keeps its last `keep` flows and draws the graph from those within
// `window`. `myelin ui` serves it (Run).
package ui
