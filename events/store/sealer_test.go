package store

import (
	"bytes"
	"errors"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"testing"
)

// nameBound is a test Sealer: it reverses the bytes and binds them to the
// key name, so a value read under another name fails to open.
type nameBound struct{}

func (nameBound) Seal(name string, p []byte) ([]byte, error) {
	out := []byte(name + "|")
	for i := len(p) - 1; i >= 0; i-- {
		out = append(out, p[i])
	}
	return out, nil
}

func (nameBound) Open(name string, s []byte) ([]byte, error) {
	if !bytes.HasPrefix(s, []byte(name+"|")) {
		return nil, errors.New("sealed for another key")
	}
	s = s[len(name)+1:]
	out := make([]byte, 0, len(s))
	for i := len(s) - 1; i >= 0; i-- {
		out = append(out, s[i])
	}
	return out, nil
}

func TestSealerAppliesToEveryReadAndWrite(t *testing.T) {
	kv := newKV(t)
	ctx := testCtx(t)
	b := NewBucket(kv, newPool, WithSealer(nameBound{}))
	if _, err := b.Create(ctx, "a", pool("a", 3)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Mutate(ctx, "a", func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
		cur.Replicas++
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := kv.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := Encode(pool("a", 4))
	if !bytes.HasPrefix(raw.Value(), []byte("a|")) || bytes.Equal(raw.Value(), plain) {
		t.Fatal("stored value was not sealed")
	}
	got, _, err := b.Get(ctx, "a")
	if err != nil || got.GetReplicas() != 4 {
		t.Fatalf("get = %v, %v; want replicas 4", got, err)
	}
	list, err := b.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Value.GetReplicas() != 4 {
		t.Fatalf("list = %v, %v", list, err)
	}
	// A sealed value copied under another key does not open.
	if _, err := kv.Put(ctx, "b", raw.Value()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "b"); err == nil {
		t.Fatal("a value moved to another key opened")
	}
	// Without the sealer the value does not decode as the message.
	if v, _, err := NewBucket(kv, newPool).Get(ctx, "a"); err == nil && v.GetReplicas() == 4 {
		t.Fatal("sealed value readable without the sealer")
	}
}
