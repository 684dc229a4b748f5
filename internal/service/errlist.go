package service

import (
	"errors"
	"fmt"
)

// maxErrors bounds the errors one Apply, release or Prune reports: a Service of
// thousands of frontends that all fail (a full map) would otherwise give one line
// each, megabytes in the log and the loop status.
const maxErrors = 5

// errList collects errors, keeping the first maxErrors and counting the rest.
type errList struct {
	errs []error
	more int
}

// add records err; nil is ignored.
func (l *errList) add(err error) {
	switch {
	case err == nil:
	case len(l.errs) < maxErrors:
		l.errs = append(l.errs, err)
	default:
		l.more++
	}
}

// err joins the errors kept, followed by how many were left out; nil when none
// was added.
func (l *errList) err() error {
	if l.more > 0 {
		return errors.Join(append(l.errs, fmt.Errorf("and %d more errors", l.more))...)
	}
	return errors.Join(l.errs...)
}
