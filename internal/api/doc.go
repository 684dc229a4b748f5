// Package api is the agent's local API on a unix socket: the request and response
// types, and the client that myelin-cni and the myelin CLI use. HTTP with JSON bodies;
// errors come back as {"error": "..."} with a status code.
package api
