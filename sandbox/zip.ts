/**
 * A minimal zip writer (PKZIP 2.0: deflate, no zip64, no encryption), for Alipay's bill download,
 * which is a zip of CSV files. node:zlib does the deflating and the CRC-32; this file only lays out
 * the local headers, the central directory and its end record (APPNOTE.TXT 4.3), which is less code
 * than a dependency would be.
 */
import { crc32, deflateRawSync } from 'node:zlib';

export interface ZipEntry {
  /** The name's bytes as stored; `utf8Name` sets the flag that says they are UTF-8. */
  name: Buffer;
  utf8Name?: boolean;
  data: Buffer;
  /** The modification time as the archive's reader should see it: its UTC fields are read as local time. */
  modified: Date;
}

/** DOS date and time (2-second resolution), the only timestamps PKZIP 2.0 headers carry. */
function dosDateTime(wall: Date): { date: number; time: number } {
  const year = Math.max(1980, wall.getUTCFullYear());
  return {
    date: ((year - 1980) << 9) | ((wall.getUTCMonth() + 1) << 5) | wall.getUTCDate(),
    time: (wall.getUTCHours() << 11) | (wall.getUTCMinutes() << 5) | Math.floor(wall.getUTCSeconds() / 2),
  };
}

export function zip(entries: readonly ZipEntry[]): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const compressed = deflateRawSync(entry.data);
    const crc = crc32(entry.data);
    const { date, time } = dosDateTime(entry.modified);
    // Bit 11: the name is UTF-8. Unset, readers take the name in the system's code page — which is
    // how Alipay's archives carry their GBK file names.
    const flags = entry.utf8Name ? 0x0800 : 0;

    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed: 2.0 (deflate)
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(8, 8); // deflate
    local.writeUInt16LE(time, 10);
    local.writeUInt16LE(date, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(compressed.length, 18);
    local.writeUInt32LE(entry.data.length, 22);
    local.writeUInt16LE(entry.name.length, 26);
    local.writeUInt16LE(0, 28);
    parts.push(local, entry.name, compressed);

    const header = Buffer.alloc(46);
    header.writeUInt32LE(0x02014b50, 0);
    header.writeUInt16LE(20, 4); // made by: 2.0, MS-DOS attributes
    header.writeUInt16LE(20, 6);
    header.writeUInt16LE(flags, 8);
    header.writeUInt16LE(8, 10);
    header.writeUInt16LE(time, 12);
    header.writeUInt16LE(date, 14);
    header.writeUInt32LE(crc, 16);
    header.writeUInt32LE(compressed.length, 20);
    header.writeUInt32LE(entry.data.length, 24);
    header.writeUInt16LE(entry.name.length, 28);
    // extra, comment, disk, internal and external attributes: all 0
    header.writeUInt32LE(offset, 42);
    central.push(header, entry.name);

    offset += local.length + entry.name.length + compressed.length;
  }
  const directory = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, directory, end]);
}
