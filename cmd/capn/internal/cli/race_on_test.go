//go:build race

package cli

// raceEnabled: the test binary was built with -race, so the CLI binary the
// end-to-end test builds is too (it then reuses the same compiled packages).
const raceEnabled = true
