package io.tidemark.contract;

/** What Spark's {@code parse_json} refuses in JSON text that Jackson's parser reads. */
final class Json {
  private Json() {}

  /**
   * Whether the first {@code end} characters of JSON text escape a UTF-16 surrogate that is not
   * half of a pair ({@code "\ud800"}, {@code "\udc00\ud800"}): Spark's Variant holds UTF-8, which
   * cannot encode one. Text decoded from valid UTF-8 holds only whole pairs itself, so only escapes
   * can make one.
   */
  static boolean hasUnpairedSurrogate(String text, int end) {
    int i = text.indexOf('\\');
    while (i >= 0 && i + 1 < end) {
      if (text.charAt(i + 1) != 'u') {
        i = text.indexOf('\\', i + 2); // an escape of one character: \\ \" \n ...
        continue;
      }
      int unit = hex4(text, i + 2, end);
      if (unit >= 0xDC00 && unit <= 0xDFFF) return true; // a low half with no high half before it
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        boolean paired = i + 7 < end && text.charAt(i + 6) == '\\' && text.charAt(i + 7) == 'u';
        int low = paired ? hex4(text, i + 8, end) : -1;
        if (low < 0xDC00 || low > 0xDFFF) return true;
        i = text.indexOf('\\', i + 12); // past the pair
        continue;
      }
      i = text.indexOf('\\', i + 6);
    }
    return false;
  }

  /** The four hex digits at {@code at} as a number, -1 when they are not four hex digits before {@code end}. */
  private static int hex4(String text, int at, int end) {
    if (at + 4 > end) return -1;
    int value = 0;
    for (int k = at; k < at + 4; k++) {
      int digit = Character.digit(text.charAt(k), 16);
      if (digit < 0) return -1;
      value = value * 16 + digit;
    }
    return value;
  }
}
