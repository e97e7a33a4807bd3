// Package seal encrypts values at rest for the `secrets` KV bucket.
//
// A value is sealed with AES-256-GCM under the keyring's primary key. The
// KV key name is the additional authenticated data, so a sealed value copied
// under another name does not open. The sealed format names the key that
// sealed it, so a keyring that holds older keys still opens values sealed
// before a rotation, and Reseal moves them onto the primary key:
//
//	offset  size  field
//	0       4     magic "capn"
//	4       1     format version (1)
//	5       1     n = length of the key id
//	6       n     key id (ASCII)
//	6+n     12    GCM nonce (random)
//	18+n    ...   ciphertext and 16-byte GCM tag
//
// The additional data is the header (bytes 0..6+n) followed by the name, so
// the version and key id are authenticated too.
//
// Rotation: start the services with the new key as primary and the old one
// as older; walk the bucket and write Reseal's result where NeedsReseal is
// true (a CAS write on the revision read); then drop the old key.
package seal
