package lwio

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/google/uuid"
)

// TestCheckServer: the client refuses server AUTH_PARAMS that do not answer
// its own, field by field.
func TestCheckServer(t *testing.T) {
	mine := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: 4096, MaxRdmaWindowSize: 1 << 20,
		MaxSendBufferSize: HeaderSize + clientMaxWrite, MaxRecvBufferSize: StatusResponseSize, HeaderSize: HeaderSize, Credits: 16}
	mine.Key[0] = 7
	good := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: 4096, BaseSequence: 1, MaxRdmaWindowSize: 256 << 10,
		MaxSendBufferSize: StatusResponseSize, MaxRecvBufferSize: 64 << 10, HeaderSize: HeaderSize, Credits: 8,
		Key: mine.Key, HasSessionID: true, SessionID: 5}
	if err := good.checkServer(&mine); err != nil {
		t.Fatalf("good parameters refused: %v", err)
	}
	for name, edit := range map[string]func(*AuthParams){
		"another key":                  func(a *AuthParams) { a.Key[0]++ },
		"no session id":                func(a *AuthParams) { a.HasSessionID = false },
		"Endian 4":                     func(a *AuthParams) { a.Endian = 4 },
		"HeaderSize 44":                func(a *AuthParams) { a.HeaderSize = 44 },
		"BaseSequence not ours plus 1": func(a *AuthParams) { a.BaseSequence = 0 },
		"no credit":                    func(a *AuthParams) { a.Credits = 0 },
		"messages beyond our buffers":  func(a *AuthParams) { a.MaxSendBufferSize = 17 },
		"MaxRecvBufferSize 100":        func(a *AuthParams) { a.MaxRecvBufferSize = 100 },
		"MaxRdmaWindowSize 0":          func(a *AuthParams) { a.MaxRdmaWindowSize = 0 },
		"PageSize 1000":                func(a *AuthParams) { a.PageSize = 1000 },
		"RdmaReadSupported 2":          func(a *AuthParams) { a.RdmaReadSupported = 2 },
	} {
		a := good
		edit(&a)
		if err := a.checkServer(&mine); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSignedParams: parameters signed under a secret decode under it and
// under no other, nor unkeyed; unkeyed ones decode only unkeyed.
func TestSignedParams(t *testing.T) {
	a := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: 4096, HeaderSize: HeaderSize, Credits: 3, HasSessionID: true, SessionID: 9}
	for _, tc := range []struct {
		signed []byte
		good   [][]byte
		bad    [][]byte
	}{
		{[]byte("k1"), [][]byte{[]byte("k1")}, [][]byte{nil, []byte("k2"), []byte("k1\n")}},
		{nil, [][]byte{nil, {}}, [][]byte{[]byte("k1")}},
	} {
		p := a.AppendSigned(nil, tc.signed)
		for _, k := range tc.good {
			var d AuthParams
			if err := d.DecodeSigned(p, k); err != nil || !reflect.DeepEqual(d, a) {
				t.Errorf("signed %q, checked %q: %v", tc.signed, k, err)
			}
		}
		for _, k := range tc.bad {
			var d AuthParams
			if err := d.DecodeSigned(p, k); err != ErrSignature {
				t.Errorf("signed %q, checked %q: %v, want ErrSignature", tc.signed, k, err)
			}
		}
	}
}

func TestParseContext(t *testing.T) {
	for _, s := range []string{"10.0.0.2:4445", "[fd00::2]:4445"} {
		at := netip.MustParseAddrPort(s)
		if a, n, err := parseContext(pipeContext(at, "EMUNIC")); a != at || n != "EMUNIC" || err != nil {
			t.Fatalf("round trip of %v: %v %q %v", at, a, n, err)
		}
	}
	for _, bad := range []string{"", "EMUNIC", `\\10.0.0.2\EMUNIC`, `\\10.0.0.2@0\EMUNIC`, `\\10.0.0.2@99999\EMUNIC`,
		`\\::1@4445\EMUNIC`, `\\10.0.0.2@4445\`, `//10.0.0.2@4445/EMUNIC`, `\\fe80::1%eth0@4445\EMUNIC`,
		`\\::ffff:10.0.0.2@4445\EMUNIC`, `\\::@4445\EMUNIC`, `\\[fd00::2]@4445\EMUNIC`} {
		if _, _, err := parseContext(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzLogon(f *testing.F) {
	l, _ := (&Logon{Name: "CLIENT", Key: uuid.MustParse("6a938069-1b7c-4bce-959f-0bd68f7b42b2")}).Append(nil)
	f.Add(l, false)
	r, _ := (&LogonResponse{Status: StatusSuccess, Key: RequestResumeKey{Key: ResumeKey{1, 2, 3}, Server: `\\10.0.0.2@4445\EMUNIC`}}).Append(nil)
	f.Add(r, true)
	f.Fuzz(func(t *testing.T, m []byte, resp bool) {
		if resp {
			var r LogonResponse
			if r.Decode(m) != nil {
				return
			}
			re, err := r.Append(nil)
			if err != nil {
				return
			}
			var again LogonResponse
			if err := again.Decode(re); err != nil || !reflect.DeepEqual(again, r) {
				t.Fatalf("re-encoded LOGON_RESP: %v", err)
			}
			return
		}
		var l Logon
		if l.Decode(m) != nil {
			return
		}
		re, err := l.Append(nil)
		if err != nil {
			return
		}
		var again Logon
		if err := again.Decode(re); err != nil || again != l {
			t.Fatalf("re-encoded LOGON: %v", err)
		}
	})
}
