/**
 * Inline images for tests: base64 `data:` URLs whose headers state a width and height (the only part
 * the router reads, request/media-tokens.ts) and whose `tag` makes the bytes, so the media key,
 * differ. Not decodable pictures; no model hub or image tool is needed.
 */

/** A PNG: signature, an IHDR chunk of `width` x `height`, then `tag` as a tEXt-like tail. */
export function pngDataUrl(width: number, height: number, tag = ''): string {
  const ihdr = Buffer.alloc(25);
  ihdr.writeUInt32BE(13, 0);
  ihdr.write('IHDR', 4, 'latin1');
  ihdr.writeUInt32BE(width, 8);
  ihdr.writeUInt32BE(height, 12);
  ihdr.writeUInt8(8, 16); // bit depth
  ihdr.writeUInt8(2, 17); // truecolour
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const bytes = Buffer.concat([signature, ihdr, Buffer.from(`tEXt${tag}`, 'latin1')]);
  return `data:image/png;base64,${bytes.toString('base64')}`;
}

/**
 * A JPEG: SOI, an APP1 (EXIF) segment of `exifBytes` filler, then a SOF0 of `width` x `height`, then
 * `tag`: its size lies past the EXIF, as in a camera's photo.
 */
export function jpegDataUrl(width: number, height: number, exifBytes = 0, tag = ''): string {
  const app1 = Buffer.alloc(4 + exifBytes);
  app1.writeUInt16BE(0xffe1, 0);
  app1.writeUInt16BE(2 + exifBytes, 2);
  const sof = Buffer.from([
    0xff, 0xc0, 0x00, 0x11, 0x08, 0, 0, 0, 0, 0x03, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1,
  ]);
  sof.writeUInt16BE(height, 5);
  sof.writeUInt16BE(width, 7);
  const bytes = Buffer.concat([Buffer.from([0xff, 0xd8]), app1, sof, Buffer.from(tag, 'latin1')]);
  return `data:image/jpeg;base64,${bytes.toString('base64')}`;
}
