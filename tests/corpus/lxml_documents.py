"""lxml (libxml2, libxslt): a document built, serialised, parsed, queried."""
from lxml import etree

root = etree.Element("root")
for i in range(20_000):
    item = etree.SubElement(root, "item", id=str(i))
    item.text = f"value {i % 50}"
data = etree.tostring(root)
parsed = etree.fromstring(data)
found = parsed.xpath("//item[@id mod 1000 = 0]/text()")
xslt = etree.XSLT(etree.XML(b'<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">'
                            b'<xsl:template match="/"><n><xsl:value-of select="count(//item)"/></n></xsl:template>'
                            b'</xsl:stylesheet>'))
print(len(data), len(found), found[:2], str(xslt(parsed)).strip()[-12:])
