package journal

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

type compressor struct {
	enc *zstd.Encoder
}

func newCompressor() (*compressor, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("journal: zstd: %w", err)
	}
	return &compressor{enc: enc}, nil
}

// compress returns the zstd form of b when it saves at least an eighth.
func (c *compressor) compress(b []byte) ([]byte, bool) {
	z := c.enc.EncodeAll(b, make([]byte, 0, len(b)/2))
	if len(z) > len(b)-len(b)/8 {
		return nil, false
	}
	return z, true
}

var decoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
})

func decompress(b []byte) ([]byte, error) {
	d, err := decoder()
	if err != nil {
		return nil, err
	}
	return d.DecodeAll(b, nil)
}

// decompressPrefix returns the first n bytes at most of the decompressed
// form of z, decompressing no further.
func decompressPrefix(z []byte, n int) ([]byte, error) {
	d, err := zstd.NewReader(bytes.NewReader(z), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var out bytes.Buffer
	if _, err := io.Copy(&out, io.LimitReader(d, int64(n))); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
