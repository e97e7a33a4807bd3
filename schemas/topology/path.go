package topology

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// splitPath reads "/a/b/c" into its tokens; "" and "/" have none.
func splitPath(path string) ([]string, error) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok || rest == "" {
		return nil, errors.New(`must start with "/" and name a field, e.g. /controlPlane/replicas`)
	}
	toks := strings.Split(rest, "/")
	for _, t := range toks {
		if t == "" {
			return nil, errors.New("has an empty segment")
		}
	}
	return toks, nil
}

func field(md protoreflect.MessageDescriptor, tok string) protoreflect.FieldDescriptor {
	fs := md.Fields()
	if fd := fs.ByJSONName(tok); fd != nil {
		return fd
	}
	return fs.ByTextName(tok)
}

// CheckPath reports whether path leads, in a ClusterSpec, to a place a
// value of typ may be written: nil or why not.
func CheckPath(path, typ string) error {
	toks, err := splitPath(path)
	if err != nil {
		return err
	}
	md := (&capnv1.ClusterSpec{}).ProtoReflect().Descriptor()
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		fd := field(md, tok)
		if fd == nil {
			return fmt.Errorf("%s has no field %q", md.Name(), tok)
		}
		last := i == len(toks)-1
		switch {
		case fd.Name() == "topology":
			return errors.New("the topology is the cluster's own, not the class's")
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.StringKind {
				return fmt.Errorf("%s is a map of %s: only maps of strings take a variable", tok, fd.MapValue().Kind())
			}
			if i+1 != len(toks)-1 {
				return fmt.Errorf("%s is a map: the path must end with one key after it", tok)
			}
			if typ != TypeString {
				return fmt.Errorf("%s holds strings, not a %s", tok, typ)
			}
			return nil
		case fd.IsList():
			if fd.Message() == nil || fd.Message().Fields().ByName("name") == nil {
				return fmt.Errorf("%s is a list a path cannot index", tok)
			}
			if last || i+1 == len(toks)-1 {
				return fmt.Errorf("%s is a list: the path must go on with a name (or *) and a field", tok)
			}
			i++ // the element's name or *
			md = fd.Message()
		case fd.Message() != nil:
			if last {
				return fmt.Errorf("%s is an object: the path must go on to a field of it", tok)
			}
			md = fd.Message()
		default:
			if !last {
				return fmt.Errorf("%s is a %s, not an object", tok, fd.Kind())
			}
			return compatible(fd, typ)
		}
	}
	return nil
}

func compatible(fd protoreflect.FieldDescriptor, typ string) error {
	ok := false
	switch typ {
	case TypeString:
		ok = fd.Kind() == protoreflect.StringKind
	case TypeInteger:
		switch fd.Kind() {
		case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
			ok = true
		}
	case TypeBoolean:
		ok = fd.Kind() == protoreflect.BoolKind
	}
	if !ok {
		return fmt.Errorf("%s is a %s field: a variable of type %s cannot set it", fd.JSONName(), fd.Kind(), typ)
	}
	return nil
}

// apply writes val at path in spec: every matching pool for a "*" or a
// name (none when the cluster has no pool of that name).
func apply(spec *capnv1.ClusterSpec, path string, val value) error {
	toks, err := splitPath(path)
	if err != nil {
		return err
	}
	return set(spec.ProtoReflect(), toks, val)
}

func set(m protoreflect.Message, toks []string, val value) error {
	fd := field(m.Descriptor(), toks[0])
	if fd == nil {
		return fmt.Errorf("%s has no field %q", m.Descriptor().Name(), toks[0])
	}
	rest := toks[1:]
	switch {
	case fd.IsMap():
		if len(rest) != 1 || fd.MapValue().Kind() != protoreflect.StringKind || val.typ != TypeString {
			return fmt.Errorf("%s takes a string under one key", toks[0])
		}
		m.Mutable(fd).Map().Set(protoreflect.ValueOfString(rest[0]).MapKey(), protoreflect.ValueOfString(val.s))
		return nil
	case fd.IsList():
		if len(rest) < 2 || fd.Message() == nil {
			return fmt.Errorf("%s must be followed by a name (or *) and a field", toks[0])
		}
		l := m.Mutable(fd).List()
		nameFD := fd.Message().Fields().ByName("name")
		for i := 0; i < l.Len(); i++ {
			el := l.Get(i).Message()
			if rest[0] != "*" && el.Get(nameFD).String() != rest[0] {
				continue
			}
			if err := set(el, rest[1:], val); err != nil {
				return err
			}
		}
		return nil
	case fd.Message() != nil:
		if len(rest) == 0 {
			return fmt.Errorf("%s is an object", toks[0])
		}
		return set(m.Mutable(fd).Message(), rest, val)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%s is not an object", toks[0])
	}
	if err := compatible(fd, val.typ); err != nil {
		return err
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString(val.s))
	case protoreflect.BoolKind:
		m.Set(fd, protoreflect.ValueOfBool(val.b))
	case protoreflect.Int32Kind:
		if val.i < math.MinInt32 || val.i > math.MaxInt32 {
			return fmt.Errorf("%d is out of range of %s", val.i, fd.JSONName())
		}
		m.Set(fd, protoreflect.ValueOfInt32(int32(val.i)))
	case protoreflect.Uint32Kind:
		if val.i < 0 || val.i > math.MaxUint32 {
			return fmt.Errorf("%d is out of range of %s", val.i, fd.JSONName())
		}
		m.Set(fd, protoreflect.ValueOfUint32(uint32(val.i)))
	case protoreflect.Uint64Kind:
		if val.i < 0 {
			return fmt.Errorf("%d is out of range of %s", val.i, fd.JSONName())
		}
		m.Set(fd, protoreflect.ValueOfUint64(uint64(val.i)))
	default:
		m.Set(fd, protoreflect.ValueOfInt64(val.i))
	}
	return nil
}
