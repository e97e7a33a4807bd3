package manifest

import (
	"errors"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Checked is a cluster that went through Default and one Validator's
// Validate, with the verdict: what the edge hands on so that nothing
// defaults or validates the same cluster again. Only Validator.Check makes
// one; the zero Checked holds no cluster and the verdict "no cluster".
//
// The cluster is the checked one, not a copy: whoever holds a Checked must
// not change it in a way that could change the verdict. The gateway sets
// only server-owned fields on it before storing it (uid, timestamps,
// generation; apiVersion and kind to the only values Validate accepts).
type Checked struct {
	c   *capnv1.Cluster
	err error
}

// Check defaults c in place and validates it. c then belongs to the
// Checked (see there); check a copy of a cluster that others read.
func (v Validator) Check(c *capnv1.Cluster) Checked {
	if c == nil {
		return Checked{}
	}
	Default(c)
	return Checked{c: c, err: v.Validate(c)}
}

// Cluster is the defaulted cluster; nil for the zero Checked.
func (k Checked) Cluster() *capnv1.Cluster { return k.c }

// Err is Validate's verdict: nil when the cluster is valid, else every bad
// field (errors.Join of *FieldError).
func (k Checked) Err() error {
	if k.c == nil {
		return errNoCluster
	}
	return k.err
}

var errNoCluster = &FieldError{Path: "(document)", Reason: "no cluster"}

// ValidateUpdate is Validator.ValidateUpdate of old into the checked
// cluster without checking it again: its verdict and the update rules.
// Only a copy of old is defaulted (a stored cluster may predate a
// default); the checked cluster already is.
func (k Checked) ValidateUpdate(old *capnv1.Cluster) error {
	if old == nil || k.c == nil {
		return k.Err()
	}
	var errs fieldErrors
	if k.err != nil {
		errs = append(errs, flatten(k.err)...)
	}
	o := proto.Clone(old).(*capnv1.Cluster)
	Default(o)
	updateRules(o, k.c, &errs)
	return errors.Join(errs...)
}
