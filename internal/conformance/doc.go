// Package conformance runs Kubernetes' own end-to-end suite (e2e.test, built by make
// setup from the pinned k8s.io/kubernetes module, scripts/build-e2e.sh) against the lab:
// it checks the suite and its images are there (naming what is missing and how to build
// it), runs e2e.test (in parallel through the ginkgo CLI when built) with the image-repo
// override that points the suite at the locally built images (images.E2ERepoList), reads
// the suite's JSON report and summarises it: N/M passed, every failure and skip with
// its reason. Used by `make conformance` and TestLabConformance* (test/e2e).
package conformance
