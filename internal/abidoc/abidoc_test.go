package abidoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"CmdOffOpcode":     "CMD_OFF_OPCODE",
		"WRRDMAWrite":      "WR_RDMA_WRITE",
		"SQOffWRID":        "SQ_OFF_WR_ID",
		"RxTCPChecksumOK":  "RX_TCP_CHECKSUM_OK",
		"StatRxDropShort":  "STAT_RX_DROP_SHORT",
		"QPConfigSize":     "QP_CONFIG_SIZE",
		"ArenaBase":        "ARENA_BASE",
		"CsOffLocalMAC":    "CS_OFF_LOCAL_MAC",
		"MaxSendSGE":       "MAX_SEND_SGE",
		"NtfAckThreshold":  "NTF_ACK_THRESHOLD",
		"CtlReservedMask":  "CTL_RESERVED_MASK",
		"OffProducerIndex": "OFF_PRODUCER_INDEX",
	} {
		if got := snakeUpper(in); got != want {
			t.Errorf("snakeUpper(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestParseFileTablesAndProblems(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.md")
	doc := strings.Join([]string{
		"# Top", "", "## Block A",
		"| Offset | Size | Constant |", "|---|---|---|", "| 0x00 | 4 | `AOffX` |", "| 0x04 | 4 | — |", "",
		"```", "| not | a | table |", "```",
		"## Block B", "| A | B |", "|---|---|", "| 1 | 2 | 3 |", "| 1 | 2", "",
	}, "\n")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tables) != 2 || len(d.Tables[0].Rows) != 2 || d.Tables[0].Heading != "Block A" || !d.Tables[0].Has("offset", "constant") {
		t.Fatalf("tables %+v", d.Tables)
	}
	if c, _ := d.Tables[0].Cell(d.Tables[0].Rows[0], "constant"); c != "`AOffX`" {
		t.Fatalf("cell %q", c)
	}
	if len(d.Problems) != 2 {
		t.Fatalf("problems %q, want a cell-count one and an unclosed row", d.Problems)
	}
	if id, err := Ident("`AOffX`"); err != nil || id != "AOffX" {
		t.Fatal(id, err)
	}
	if _, err := Ident("AOffX"); err == nil {
		t.Fatal("an unquoted identifier was accepted")
	}
	if Slug("Send queue entry (host → device, 128 bytes)") != "send-queue-entry-host--device-128-bytes" {
		t.Fatal(Slug("Send queue entry (host → device, 128 bytes)"))
	}
}
