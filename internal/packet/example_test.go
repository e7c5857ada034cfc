package packet_test

import (
	"fmt"

	"github.com/xrdmon/xrdmon/internal/packet"
)

func ExampleDecodeFStream() {
	var fb packet.FStreamBuilder
	fb.Reset(nil, packet.Header{Pseq: 1, Stod: 1700000000}, 1700000000, 0, 258305997245184, true)
	fb.Open(packet.FileOpen{FileID: 10, FileSize: 4096, HasLFN: true, User: 3, LFN: []byte("/store/f.root")})
	fb.Close(packet.FileClose{FileID: 10, Read: 4096})
	pkt := fb.Finish(1700000060)

	f, err := packet.DecodeFStream(pkt)
	if err != nil {
		fmt.Println(err)
		return
	}
	it := f.Records()
	for it.Next() {
		switch r := it.Rec(); r.Type {
		case packet.RecOpen:
			o := r.Open()
			fmt.Printf("open file %d by user %d: %s\n", o.FileID, o.User, o.LFN)
		case packet.RecClose:
			fmt.Printf("close file %d: read %d bytes\n", r.ID, r.Close().Read)
		}
	}
	// Output:
	// open file 10 by user 3: /store/f.root
	// close file 10: read 4096 bytes
}

func ExampleValidate() {
	for _, b := range [][]byte{
		packet.AppendMap(nil, packet.Header{Code: packet.CodeToken}, 9, []byte("https/u.1:2@h\n&s=subject")),
		[]byte(`<statistics tod="1700000000"/>`),
	} {
		k, err := packet.Validate(b)
		if err != nil {
			fmt.Println(k, "rejected:", packet.ReasonOf(err))
			continue
		}
		fmt.Println(k, "accepted")
	}
	// Output:
	// map rejected: bad_syntax
	// xml_summary accepted
}
