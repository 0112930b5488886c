package trace

import (
	"go/constant"
	"go/token"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestDocMatchesCode holds docs/trace.md to this package: every row that
// names a constant has its value, and every exported numeric constant has a
// row.
func TestDocMatchesCode(t *testing.T) {
	problems, err := abidoc.CheckDoc(".", "../docs/trace.md", func(c abidoc.Const) bool {
		return token.IsExported(c.Name) && c.Val.Kind() != constant.String
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
