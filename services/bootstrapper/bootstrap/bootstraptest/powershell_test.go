package bootstraptest

import (
	"strings"
	"testing"
)

func TestCheckPowerShell(t *testing.T) {
	tests := []struct {
		name, script, header string
		want                 []string // error lines (substrings); none: valid
	}{
		{"valid", `#ps1_sysnative
$ErrorActionPreference = 'Stop'
function Invoke-X {
    param([string]$Name)
    if ($Name -ne '') { Write-Output "name: $($Name.ToUpper()) (ok)" }
}
Invoke-X -Name 'it''s { not a brace'
Write-Output "a BT" quote and "" another"
# a comment with { ( [ and && that count for nothing
<# a block
   comment } #>
$h = @'
here { ( '
'@
$g = @"
here $($h.Length) "
"@
Get-Item C:\k | BT
    Out-Null
`, "#ps1_sysnative", nil},
		{"no header", "Write-Output 'x'\n", "#ps1_sysnative", []string{`line 1: "Write-Output 'x'", want the header #ps1_sysnative`}},
		{"unclosed brace", "#h\nif ($true) {\n  Write-Output 'x'\n", "#h", []string{`line 2: '{' is never closed`}},
		{"stray paren", "#h\nWrite-Output 'x')\n", "#h", []string{`line 2: ')' closes nothing open`}},
		{"crossed", "#h\n{ ( } )\n", "#h", []string{`line 2: '}' does not close the '(' of line 2`, `line 2: '{' is never closed`}},
		{"unclosed single", "#h\nWrite-Output 'it's'\n", "#h", []string{"line 2: single-quoted string is never closed"}},
		{"unclosed double", "#h\nWrite-Output \"x `\"\n", "#h", []string{"line 2: double-quoted string is never closed"}},
		{"unclosed subexpression", "#h\nWrite-Output \"$(1 + (2)\"\n", "#h", []string{"double-quoted string is never closed"}},
		{"unclosed here-string", "#h\n$x = @'\nbody\n '@\n", "#h", []string{"line 2: here-string @' is never closed"}},
		{"unclosed block comment", "#h\n<# x\n", "#h", []string{"line 2: block comment <# is never closed"}},
		{"bash chain", "#h\nmkdir -p /x && touch /x/y\n", "#h", []string{`line 2: "&&" is not an operator of Windows PowerShell 5.1`}},
		{"bash or", "#h\ntest -f x || exit 1\n", "#h", []string{`"||" is not an operator`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPowerShell(strings.ReplaceAll(tt.script, "BT", "`"), tt.header)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused a valid script: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
