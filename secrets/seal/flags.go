package seal

import (
	"errors"
	"os"
	"strings"

	"github.com/capn-dev/capn/services/daemon"
)

// LoadKeyring is the keyring the services' secrets-key flags name (the
// bootstrapper, the gateway and the health-watcher take the same ones):
// the primary key from keyFile (--secrets-key-file), else from
// $CAPN_SECRETS_KEY, and the old keys from the comma-separated
// oldKeyFiles (--secrets-old-key-files). Without a primary key it returns
// nil, nil: the caller decides whether that is allowed. Errors are
// daemon.FieldErrors naming the flag and never holding a key.
func LoadKeyring(keyFile, oldKeyFiles string) (*Keyring, error) {
	var primary Key
	var err error
	switch {
	case keyFile != "":
		if primary, err = LoadKey(keyFile); err != nil {
			return nil, &daemon.FieldError{Flag: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Value: keyFile, Problem: err.Error()}
		}
	default:
		if _, ok := os.LookupEnv(KeyEnv); !ok {
			return nil, nil
		}
		if primary, err = KeyFromEnv(KeyEnv); err != nil {
			return nil, &daemon.FieldError{Env: KeyEnv, Value: "(hidden)", Problem: err.Error()}
		}
	}
	var old []Key
	var errs []error
	for f := range strings.SplitSeq(oldKeyFiles, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := LoadKey(f)
		if err != nil {
			errs = append(errs, &daemon.FieldError{Flag: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Value: f, Problem: err.Error()})
			continue
		}
		old = append(old, k)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewKeyring(primary, old...)
}
