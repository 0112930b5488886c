package lwio

import (
	"go/constant"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestDocMatchesCode holds docs/lwio.md to this package both ways: every
// row that names a constant has its value, and every exported constant has
// a row.
func TestDocMatchesCode(t *testing.T) {
	problems, err := abidoc.CheckDoc(".", "../docs/lwio.md", func(c abidoc.Const) bool {
		// Names (ProviderName) are given in the prose.
		return c.Val.Kind() != constant.String
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
