package io.tidemark.contract;

/** Well-formed UTF-8, as Spark's {@code is_valid_utf8}: no overlong forms, surrogates or code points above U+10FFFF. */
final class Utf8 {
  private Utf8() {}

  static boolean isValid(byte[] bytes) {
    int i = 0;
    int n = bytes.length;
    while (i < n) {
      int c = bytes[i] & 0xFF;
      if (c < 0x80) {
        i++;
        continue;
      }
      int more;
      int least;
      if (c >= 0xC2 && c <= 0xDF) {
        more = 1;
        least = 0x80;
      } else if (c >= 0xE0 && c <= 0xEF) {
        more = 2;
        least = 0x800;
      } else if (c >= 0xF0 && c <= 0xF4) {
        more = 3;
        least = 0x10000;
      } else {
        return false;
      }
      if (i + more >= n) return false;
      int codePoint = c & (0x3F >> more);
      for (int k = 1; k <= more; k++) {
        int next = bytes[i + k] & 0xFF;
        if ((next & 0xC0) != 0x80) return false;
        codePoint = (codePoint << 6) | (next & 0x3F);
      }
      if (codePoint < least || codePoint > 0x10FFFF || (codePoint >= 0xD800 && codePoint <= 0xDFFF)) {
        return false;
      }
      i += more + 1;
    }
    return true;
  }
}
