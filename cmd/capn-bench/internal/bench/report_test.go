package bench

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReportKeepsWhatIsAroundTheMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := writeReport(path, "first\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := beginMarker + "\nfirst\n" + endMarker + "\n"; string(b) != want {
		t.Fatalf("a new file:\n%s\nwant:\n%s", b, want)
	}
	doc := "# title\n\nintro\n\n" + string(b) + "\n## Against the goals\n\nanalysis\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(path, "second\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if want := "# title\n\nintro\n\n" + beginMarker + "\nsecond\n" + endMarker + "\n\n## Against the goals\n\nanalysis\n"; string(b) != want {
		t.Fatalf("an existing file:\n%s\nwant:\n%s", b, want)
	}
}

func TestWriteReportBlockAppendsWhereNoMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	doc := "# title\n\n" + beginMarker + "\nfleet\n" + endMarker + "\n\n## Hosted\n\nprose\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReportBlock(path, "hosted 1\n", hostedBeginMarker, hostedEndMarker); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := doc + "\n" + hostedBeginMarker + "\nhosted 1\n" + hostedEndMarker + "\n"; string(b) != want {
		t.Fatalf("appended:\n%s\nwant:\n%s", b, want)
	}
	if err := writeReportBlock(path, "hosted 2\n", hostedBeginMarker, hostedEndMarker); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if want := doc + "\n" + hostedBeginMarker + "\nhosted 2\n" + hostedEndMarker + "\n"; string(b) != want {
		t.Fatalf("replaced:\n%s\nwant:\n%s", b, want)
	}
}
