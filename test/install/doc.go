// Package install tests the Helm chart (install/helm/myelin): helm lint --strict, the
// values schema, the rendered objects against the facts they copy (the lab's RBAC, the
// CRDs in deploy/, the configuration keys), what `myelin sysdump` keeps and redacts of
// a rendered install, and — with a lab — a server-side dry run,
// an install whose account `kubectl auth can-i --list` checks against docs/install.md,
// and the refusal of a second install.
package install
