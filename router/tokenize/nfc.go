package tokenize

// nfc returns s in Unicode Normalization Form C (the "NFC" normalizer of tokenizer.json).
func nfc(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xCC { // U+0300 and up: the first code point that NFC can change
			return nfcSlow(s)
		}
	}
	return s
}

func nfcSlow(s string) string { return s } // TODO
